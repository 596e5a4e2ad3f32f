package server_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// propertyReader records, per cluster, the properties its reconciler read
// for its cluster through Server.ClusterProperties.
type propertyReader struct {
	srv  *server.Server
	mu   sync.Mutex
	seen map[string]map[string]string // cluster → properties last read
	errs []error
}

func (r *propertyReader) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	cluster, _ := known.ClusterFrom(ctx)
	props, err := r.srv.ClusterProperties(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs = append(r.errs, err)
		return ctrl.Result{}, nil
	}
	r.seen[cluster] = props
	return ctrl.Result{}, nil
}

func (r *propertyReader) last(cluster string) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[cluster]
}

// TestPropertiesReachReconcilersWithoutRestart checks that a member's
// Properties are what its reconcilers read for their cluster, and that a
// change to them alone keeps the running Manager. The cluster's name
// carries a "/", as a Cluster API or ClusterProfile name does.
func TestPropertiesReachReconcilersWithoutRestart(t *testing.T) {
	ns := testNamespace(t)
	r := startServer(t, ns, nil)
	reader := &propertyReader{srv: r.srv, seen: map[string]map[string]string{}}
	r.srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("properties-" + ns).For(&corev1.ConfigMap{}).Complete(reader)
	})

	const name = "fleet-a/m1"
	nc := config.NewNamedConfig(name, fleet.Cluster("m1").Config)
	nc.Properties = map[string]string{"cluster.clusterset.k8s.io": "id-1", "clusterset.k8s.io": "set-a"}
	if err := r.srv.Add(nc); err != nil {
		t.Fatal(err)
	}
	waitReady(t, r.srv, name)
	createConfigMap(t, "m1", ns, "p1")
	test.Eventually(t, 30*time.Second, "reconciler reads its properties", func() bool {
		return maps.Equal(reader.last(name), nc.Properties)
	})
	// The ConfigMap reconciler saw the name with its "/" in ctx, and the
	// cluster's series carry it as their label.
	test.Eventually(t, 30*time.Second, "p1 acknowledged in "+name, func() bool { return ackIn(t, "m1", ns, "p1") == name })
	if n := seriesOf(t, name); n == 0 {
		t.Errorf("no mccr_cluster_ series labelled cluster=%q", name)
	}

	before, err := r.srv.GetManager(name)
	if err != nil {
		t.Fatal(err)
	}
	st0, _ := r.srv.Status(name)

	changed := config.NewNamedConfig(name, fleet.Cluster("m1").Config)
	changed.Properties = map[string]string{"cluster.clusterset.k8s.io": "id-1", "clusterset.k8s.io": "set-b"}
	if err := r.srv.Update(changed); err != nil {
		t.Fatal(err)
	}
	props, err := r.srv.ClusterProperties(known.WithCluster(t.Context(), name))
	if err != nil || !maps.Equal(props, changed.Properties) {
		t.Fatalf("ClusterProperties after Update = %v, %v; want %v", props, err, changed.Properties)
	}
	// A caller changing the returned map changes nothing in the Server.
	props["clusterset.k8s.io"] = "mutated"
	if st, _ := r.srv.Status(name); st.Properties["clusterset.k8s.io"] != "set-b" {
		t.Fatalf("Status properties changed through a returned map: %v", st.Properties)
	}
	after, err := r.srv.GetManager(name)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatal("a change of Properties alone restarted the member's Manager")
	}
	if st, _ := r.srv.Status(name); st.Restarts != st0.Restarts || st.Phase != server.PhaseReady {
		t.Fatalf("status after a Properties change: phase %s, restarts %d (was %d)", st.Phase, st.Restarts, st0.Restarts)
	}
	createConfigMap(t, "m1", ns, "p2")
	test.Eventually(t, 30*time.Second, "reconciler reads the new properties", func() bool {
		return reader.last(name)["clusterset.k8s.io"] == "set-b"
	})

	// The same config again is no change at all.
	if err := r.srv.Update(changed); err != nil {
		t.Fatal(err)
	}
	// The same cluster served the same way from another object (a Secret
	// renamed): Status names the new source, the Manager runs on.
	moved := config.NewNamedConfig(name, fleet.Cluster("m1").Config)
	moved.Properties = changed.Properties
	moved.Source = config.Source{Object: "Secret ns/renamed"}
	if err := r.srv.Update(moved); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.srv.Status(name); st.Source != moved.Source || st.Restarts != st0.Restarts || st.Phase != server.PhaseReady {
		t.Fatalf("status after a change of Source alone: source %q, phase %s, restarts %d (was %d)", st.Source, st.Phase, st.Restarts, st0.Restarts)
	}
	if m, _ := r.srv.GetManager(name); m != before {
		t.Fatal("a change of Source alone restarted the member's Manager")
	}
	// A ctx naming no cluster, or an unknown one, is ErrClusterNotFound.
	if _, err := r.srv.ClusterProperties(t.Context()); !errors.Is(err, server.ErrClusterNotFound) {
		t.Errorf("ClusterProperties without a cluster in ctx: %v", err)
	}
	if _, err := r.srv.ClusterProperties(known.WithCluster(t.Context(), "fleet-a/none")); !errors.Is(err, server.ErrClusterNotFound) {
		t.Errorf("ClusterProperties of an unknown cluster: %v", err)
	}
	// Read under the reader's lock, and let go of it before the Delete: a
	// Reconcile still running (the other controller's acknowledgement
	// updates p2) waits for that lock, and the Delete for that Reconcile.
	reader.mu.Lock()
	errs := slices.Clone(reader.errs)
	reader.mu.Unlock()
	if len(errs) > 0 {
		t.Errorf("reconciler could not read its properties: %v", errs)
	}

	if err := r.srv.Delete(name); err != nil {
		t.Fatal(err)
	}
	if n := seriesOf(t, name); n != 0 {
		t.Errorf("%d series of %q left after Delete", n, name)
	}
}
