package server_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// widgetCRD returns a CRD for a namespaced kind Widget in a group of the
// test's own (so that a run after another still finds it missing), and the
// kind.
func widgetCRD(ns string) (*apiextensionsv1.CustomResourceDefinition, schema.GroupVersionKind) {
	group := strings.ReplaceAll(ns, "-", "") + ".mccr.test"
	return test.OpenCRD(group, "Widget", true), schema.GroupVersionKind{Group: group, Version: "v1", Kind: "Widget"}
}

// TestLateCRDWaitsWithoutHoldingTheMember: a member whose reconciler setup
// watches a kind its cluster does not serve yet is Ready and runs its other
// controllers; Status names the kind; once the CRD is installed the waiting
// controller reconciles, without a restart. Every reconcile is counted in
// the cluster's own mccr_reconcile_ series, which leave with the cluster.
func TestLateCRDWaitsWithoutHoldingTheMember(t *testing.T) {
	ns := testNamespace(t)
	crd, gvk := widgetCRD(ns)
	r := startServer(t, ns, nil)
	var widgets atomic.Int64
	var firstWidget atomic.Int64 // unix nanos of the first Widget reconcile
	r.srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		return ctrl.NewControllerManagedBy(mgr).Named("widgets-" + ns).For(u).
			Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
				if widgets.Add(1) == 1 {
					firstWidget.Store(time.Now().UnixNano())
				}
				return reconcile.Result{}, nil
			}))
	})
	// A host controller following Widgets of the whole fleet waits for the
	// kind in m1 too.
	var fleetWidget atomic.Int64 // unix nanos of the first Widget event on the host
	hostWidget := &unstructured.Unstructured{}
	hostWidget.SetGroupVersionKind(gvk)
	err := ctrl.NewControllerManagedBy(r.srv.GetHostManager()).Named("fleet-widgets-" + ns).
		WatchesRawSource(server.FleetKind(r.srv, hostWidget, handler.Funcs{
			CreateFunc: func(context.Context, event.CreateEvent, workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				fleetWidget.CompareAndSwap(0, time.Now().UnixNano())
			},
		})).
		Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil }))
	if err != nil {
		t.Fatal(err)
	}
	addReady(t, r.srv, "m1")
	createConfigMap(t, "m1", ns, "works")
	test.Eventually(t, 30*time.Second, "the other controller reconciles", func() bool { return ackIn(t, "m1", ns, "works") == "m1" })
	want := gvk.String()
	test.Eventually(t, 10*time.Second, "Status names the waited kind", func() bool {
		st, _ := r.srv.Status("m1")
		return slices.Contains(st.WaitingFor, want)
	})

	installed := time.Now()
	if err := test.InstallCRDObjects(fleet.Cluster("m1").Config, crd); err != nil {
		t.Fatal(err)
	}
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(gvk)
	w.SetNamespace(ns)
	w.SetName("w1")
	if err := adminClient(t, "m1").Create(t.Context(), w); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 30*time.Second, "the waiting controller reconciles", func() bool { return widgets.Load() > 0 })
	test.Eventually(t, 30*time.Second, "the host's fleet source delivers the Widget", func() bool { return fleetWidget.Load() != 0 })
	t.Logf("figure: CRD installed → waiting controller's first reconcile: %s; → the host's FleetKind event: %s",
		time.Unix(0, firstWidget.Load()).Sub(installed).Round(time.Millisecond),
		time.Unix(0, fleetWidget.Load()).Sub(installed).Round(time.Millisecond))
	st, _ := r.srv.Status("m1")
	if st.Restarts != 0 || st.Failures != 0 || st.Phase != server.PhaseReady {
		t.Errorf("member after the CRD came: phase %s, restarts %d, failures %d", st.Phase, st.Restarts, st.Failures)
	}
	test.Eventually(t, 10*time.Second, "Status waits for nothing", func() bool {
		st, _ := r.srv.Status("m1")
		return len(st.WaitingFor) == 0
	})

	// Per-cluster reconcile series: the ConfigMap controller's successes in
	// m1, and nothing once m1 is gone.
	if n := reconciles(t, "m1", "configmaps-"+ns, "success"); n == 0 {
		t.Error("no mccr_reconcile_total{result=success} for m1's ConfigMap controller")
	}
	if n := reconciles(t, "m1", "widgets-"+ns, "success"); n == 0 {
		t.Error("no mccr_reconcile_total{result=success} for m1's Widget controller")
	}
	if err := r.srv.Delete("m1"); err != nil {
		t.Fatal(err)
	}
	if n := reconcileSeries(t, "m1"); n != 0 {
		t.Errorf("%d mccr_reconcile_ series of a deleted cluster remain", n)
	}
}

// reconciles reads mccr_reconcile_total for one cluster, controller and
// result.
func reconciles(t *testing.T, cluster, controller, result string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "mccr_reconcile_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["cluster"] == cluster && labels["controller"] == controller && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// reconcileSeries counts the mccr_reconcile_ series of one cluster.
func reconcileSeries(t *testing.T, cluster string) int {
	t.Helper()
	return countSeries(t, "mccr_reconcile_", func(c string) bool { return c == cluster })
}
