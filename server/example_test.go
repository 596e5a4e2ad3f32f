package server_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
)

// One reconciler, registered once, runs in every member; the ctx tells it
// which. In a program the host config is ctrl.GetConfigOrDie() and the
// members come from kubeconfigs; here they are the test fleet's.
func Example() {
	srv, err := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{
		Logger:                 logr.Discard(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		panic(err)
	}
	seen := make(chan string, 4)
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("example-namespaces").For(&corev1.Namespace{}).
			Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
				if req.Name == "kube-system" {
					cluster, _ := known.ClusterFrom(ctx)
					seen <- cluster
				}
				return reconcile.Result{}, nil
			}))
	})
	for _, name := range []string{"m1", "m2"} {
		if err := srv.Add(fleet.Cluster(name).Named); err != nil {
			panic(err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- srv.Start(ctx) }()
	clusters := []string{<-seen, <-seen}
	slices.Sort(clusters)
	fmt.Println("kube-system reconciled in", clusters)

	// The fan-out client reads from the cluster named in ctx.
	var ns corev1.Namespace
	err = srv.GetClient().Get(known.WithCluster(ctx, "m2"), client.ObjectKey{Name: "kube-system"}, &ns)
	fmt.Println("m2 has kube-system:", err == nil)

	cancel()
	fmt.Println("stopped:", <-done)
	// Output:
	// kube-system reconciled in [m1 m2]
	// m2 has kube-system: true
	// stopped: <nil>
}

// Watch feeds a Server from a directory of kubeconfig files: one cluster
// per context, added, updated and deleted as the files change.
func ExampleServer_Watch() {
	srv, err := server.NewServer(ctrl.GetConfigOrDie(), ctrl.Options{})
	if err != nil {
		panic(err)
	}
	w, err := configwatcher.NewFileWatcher("/etc/mccr/clusters")
	if err != nil {
		panic(err)
	}
	srv.Watch(w)
	_ = srv.Start(ctrl.SetupSignalHandler())
}

// Statuses tells where every member is; the same figures are on the host's
// metrics endpoint.
func ExampleServer_Statuses() {
	var srv *server.Server // from server.NewServer
	for _, st := range srv.Statuses() {
		fmt.Printf("%s: %s since %s (failures %d, last error %v)\n",
			st.Name, st.Phase, st.Since.Format("15:04:05"), st.Failures, st.LastError)
	}
}

// A poller of a large fleet (an exporter, a page) passes the slice of its
// last call back, emptied: once it holds the fleet, a call allocates
// nothing.
func ExampleServer_AppendStatuses() {
	var srv *server.Server // from server.NewServer
	var statuses []server.ClusterStatus
	for range time.Tick(10 * time.Second) {
		statuses = srv.AppendStatuses(statuses[:0])
		ready := 0
		for _, st := range statuses {
			if st.Phase == server.PhaseReady {
				ready++
			}
		}
		fmt.Printf("%d of %d members ready\n", ready, len(statuses))
	}
}
