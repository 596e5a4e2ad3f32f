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
// A package whose tests share one fleet (API servers are the expensive
// part: 2–3 s to start and some 300 MiB each) starts it with Main:
//
//	var fleet *test.Fleet
//
//	func TestMain(m *testing.M) {
//		test.Main(m, &fleet, test.Options{}, "host", "east", "west")
//	}
//
// and each test works in names or namespaces of its own (NamespaceName,
// Fleet.CreateNamespace). A running fleet grows and shrinks: Fleet.Add
// starts more clusters (a test that needs one of its own), Fleet.Remove
// stops one. Clusters are stopped with the fleet unless removed before.
// Test cleanups run last-registered first, so create a fleet (NewFleet)
// before whatever uses it (Run), and it stops after it.
//
// # Many clusters on a few API servers
//
// A fleet of a thousand clusters cannot be a thousand API servers on one
// machine. Fleet.AddEndpoints gives each of N names a loopback address of
// its own in front of the fleet's few real API servers (an Endpoint, with
// its config, NamedConfig and kubeconfig file), so that a Server, a
// FileWatcher or anything else sees N different API servers: nothing keyed
// on an address or on TLS settings is shared among them, as nothing is
// among real clusters. Names on one API server without endpoints share
// connections and REST mappers, which flatters any per-cluster figure. A
// helper process forwards the endpoints' connections byte for byte (TLS
// passes through), apart from the process under test, so a test or a
// benchmark measures only its own:
//
//	eps := test.NewEndpoints(t, fleet, nil, names...) // in turn over fleet.Clusters
//	for _, e := range eps {
//		_ = srv.Add(e.Named)
//	}
//
// (Fleet.AddEndpoints outside a test; NewEndpoints removes them when the
// test ends.)
//
// Around the fleet, the kit has what tests of controllers on it keep
// needing: Eventually to wait for what must happen, Run to start a Server or
// Manager for the rest of a test, Cluster.AdminClient to set up and check
// objects (Fleet.CloseConnections before a leak check),
// Fleet.CreateNamespace and NamespaceName for a namespace per test,
// ServiceAccountToken for a member's credentials, JoinKubeFed to join a
// member the way kubefedctl does (KubeFedCRDPath has the CRD it needs), and
// FirstReconcile to know when a cluster's controllers are at work.
//
// # Faults and ownership
//
// A controller is judged by what it does when the control plane breaks. A
// FaultProxy (NewFaultProxy in a test, StartFaultProxy elsewhere) stands
// in front of one API server on a loopback port of the test process, TLS
// passing through; give the controller its Config instead of the
// cluster's and break the link at any moment, for the open connections
// and the new ones alike:
//
//	p := test.NewFaultProxy(t, fleet.Cluster("east").Config)
//	_ = srv.Add(config.NewNamedConfig("east", p.Config()))
//	...
//	_ = p.Freeze()      // a partition: every call hangs, nothing is closed
//	_ = p.Pass()        // healed: held bytes flow on (Cut first to end them)
//	p.Refuse()          // the API server is down: refused, reset
//	_ = p.LoseAnswers() // writes are applied, their answers never arrive
//	p.SetLatency(200 * time.Millisecond)
//
// Under LoseAnswers, a write larger than the API server's HTTP/2
// flow-control window for one stream (256 KiB for kube-apiserver) reaches
// it only in part over HTTP/2, which Config's clients speak, and is not
// applied: give the controller HTTP1Config instead to lose the answers of
// writes of any size.
//
// An OwnershipRecorder follows which replica ran which cluster over a
// whole run, for sharded controllers, whose promise is that a cluster has
// at most one owner at any instant and is never without one for long. Its
// Setup, given to every replica's Server, records each member Manager
// from the moment its controllers may run (its caches synced, and its
// replica elected when the host uses leader election: a warm standby's
// members own nothing) until it has stopped entirely;
// its Report lists, per cluster, the intervals with two owners and those
// with none, and Check fails on either:
//
//	rec := &test.OwnershipRecorder{}
//	srv1.AddReconcilerSetup(rec.Setup("replica-1"))
//	srv2.AddReconcilerSetup(rec.Setup("replica-2"))
//	... // start both, let them settle, attack them
//	if err := rec.Report(from, time.Now()).Check(15 * time.Second); err != nil {
//		t.Fatal(err)
//	}
//
// # Controller names
//
// controller-runtime refuses a second controller of the same name in one
// process ("controller with name X already exists"). A Server runs the same
// setups in every member and lifts that check for its members' Managers,
// but not for its host Manager: two Servers in one test binary (two tests,
// or one test run twice with -count) that register host controllers of
// the same name collide. Give each test's host controllers a name of its
// own (builder's Named), or set Controller.SkipNameValidation in the
// ctrl.Options of Servers built by tests. Member controllers need neither.
//
// # Processes
//
// The binaries come from KUBEBUILDER_ASSETS (or Options.BinaryAssetsDirectory).
// In the mccr repository `make kubebins` builds them from Go modules; in your
// own project point KUBEBUILDER_ASSETS at any kube-apiserver and etcd. When
// they are missing, Start fails with a message that says so.
//
// On Linux the API servers and etcds of a fleet die with the process that
// started them, however it ends (SIGKILL, go test -timeout, a panic): each
// is started through a small shim, the running executable itself under the
// binary's name, which arms the kernel's parent-death signal and execs the
// real binary. The shim also records each kube-apiserver's pid and command
// line, which Cluster.StopAPIServer and StartAPIServer use to crash and
// restart it; and Stop kills a test API server outright instead of waiting
// for a graceful shutdown. Elsewhere (macOS) the fleet works the same, but
// a killed test binary leaves its API servers running and StopAPIServer
// returns ErrFaultInjectionUnsupported. The kit never reads /proc.
//
// The fleet itself does not need the testing package: Start and Fleet.Stop
// work from a plain program, which is how `make demo` runs its fleet.
package test
