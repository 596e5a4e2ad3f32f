// Package test starts a fleet of real Kubernetes API servers for tests and
// demos.
//
// Each cluster of a Fleet is a real kube-apiserver backed by its own etcd,
// started through controller-runtime's envtest. StartFleet starts them in
// parallel and hands back, per cluster, an admin *rest.Config, a
// config.NamedConfig, and a kubeconfig file written for it, so code that
// reads kubeconfigs from disk can be tested as it runs in production.
//
//	func TestMain(m *testing.M) { ... }
//
//	func TestSomething(t *testing.T) {
//		fleet := test.NewFleet(t, test.Options{}, "east", "west")
//		srv, _ := server.NewServer(fleet.Host().Config, ctrl.Options{})
//		for _, c := range fleet.Clusters {
//			_ = srv.Add(c.Named)
//		}
//		...
//	}
//
// The binaries come from KUBEBUILDER_ASSETS (or Options.BinaryAssetsDirectory).
// In the mccr repository `make kubebins` builds them from Go modules; in your
// own project point KUBEBUILDER_ASSETS at any kube-apiserver and etcd. When
// they are missing, StartFleet fails with a message that says so.
//
// Nothing here needs the testing package to run: Start and Fleet.Stop work
// from a plain program, which is how `make demo` runs its fleet.
package test
