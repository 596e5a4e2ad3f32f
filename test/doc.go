// Package test starts a fleet of real Kubernetes API servers for tests and
// demos.
//
// Each cluster of a Fleet is a real kube-apiserver backed by its own etcd,
// started through controller-runtime's envtest. Start starts them in
// parallel and hands back, per cluster, an admin *rest.Config, a
// config.NamedConfig, and a kubeconfig file written for it, so code that
// reads kubeconfigs from disk can be tested as it runs in production.
//
//	func TestMain(m *testing.M) { ... }
//
//	func TestSomething(t *testing.T) {
//		fleet := test.NewFleet(t, test.Options{}, "host", "east", "west")
//		srv, _ := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{})
//		for _, name := range []string{"east", "west"} {
//			_ = srv.Add(fleet.Cluster(name).Named)
//		}
//		// register reconcilers with srv.AddReconcilerSetup, then:
//		test.Run(t, srv)
//		ns := test.NamespaceName(t)
//		fleet.CreateNamespace(t, ns)
//		...
//		test.Eventually(t, 10*time.Second, "east reconciled", func() bool { ... })
//	}
//
// Around the fleet, the kit has what tests of controllers on it keep
// needing: Eventually to wait for what must happen, Run to start a Server or
// Manager for the rest of a test, Cluster.AdminClient to set up and check
// objects (Fleet.CloseConnections before a leak check),
// Fleet.CreateNamespace and NamespaceName for a namespace per test,
// ServiceAccountToken for a member's credentials, JoinKubeFed to join a
// member the way kubefedctl does, and FirstReconcile to know when a
// cluster's controllers are at work.
//
// The binaries come from KUBEBUILDER_ASSETS (or Options.BinaryAssetsDirectory).
// In the mccr repository `make kubebins` builds them from Go modules; in your
// own project point KUBEBUILDER_ASSETS at any kube-apiserver and etcd. When
// they are missing, Start fails with a message that says so.
//
// The fleet itself does not need the testing package: Start and Fleet.Stop
// work from a plain program, which is how `make demo` runs its fleet.
package test
