package configwatcher_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/go-logr/logr/testr"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/known"
	mccrserver "github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// slashReconciler records, for each cluster name its Reconcile ctx
// carries, whether the fan-out client reached that cluster with that ctx.
type slashReconciler struct {
	client  client.Reader
	mu      sync.Mutex
	reached map[string]bool
}

func (r *slashReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	name, ok := known.ClusterFrom(ctx)
	if !ok {
		return reconcile.Result{}, errors.New("no cluster name in the Reconcile ctx")
	}
	var ns corev1.Namespace
	err := r.client.Get(ctx, req.NamespacedName, &ns)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reached[name] = r.reached[name] || err == nil
	return reconcile.Result{}, err
}

func (r *slashReconciler) hasReached(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reached[name]
}

// lines is a logger's output, kept for checks.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) logger(t *testing.T) logr.Logger {
	tl := testr.New(t)
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		l.all = append(l.all, prefix+" "+args)
		l.mu.Unlock()
		tl.Info(prefix + " " + args)
	}, funcr.Options{Verbosity: 1})
}

func (l *lines) any(parts ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.all {
		if containsAll(line, parts) {
			return true
		}
	}
	return false
}

// clusterReadyMetric returns the value of mccr_cluster_ready for cluster,
// and whether the series exists.
func clusterReadyMetric(t *testing.T, cluster string) (float64, bool) {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "mccr_cluster_ready" {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelValue(m, "cluster") == cluster {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// testServer: a Server fed by the watcher runs a reconciler in a Cluster
// API workload cluster under its "namespace/name" name: the name is in the
// Reconcile ctx, the fan-out client routes by it, and Status, the metrics
// and the logs carry it; deleting the Cluster deletes the member.
func (e *clusterAPIEnv) testServer(t *testing.T) {
	ns := e.namespace(t)
	name := ns + "/wl"
	var logs lines
	log := logs.logger(t)
	w, err := configwatcher.NewClusterAPIWatcher(e.host.Config, configwatcher.WithClusterAPINamespaces(ns), configwatcher.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	srv := newWatchingServer(t, e.host.Config, log, w)
	rec := &slashReconciler{client: srv.GetClient(), reached: map[string]bool{}}
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("capi-slash").For(&corev1.Namespace{}).Complete(rec)
	})
	stop := test.Run(t, srv)

	cl, _ := e.join(t, ns, "wl", e.token)
	test.Eventually(t, kfPatience, name+" Ready", func() bool {
		st, err := srv.Status(name)
		return err == nil && st.Phase == mccrserver.PhaseReady && st.Name == name
	})
	test.Eventually(t, kfPatience, "a reconcile in "+name+" through the fan-out client", func() bool {
		return rec.hasReached(name)
	})
	if names := srv.ClusterNames(); len(names) != 1 || names[0] != name {
		t.Errorf("ClusterNames() = %q, want [%q]", names, name)
	}
	if v, ok := clusterReadyMetric(t, name); !ok || v != 1 {
		t.Errorf("mccr_cluster_ready{cluster=%q} = %v (present: %v), want 1", name, v, ok)
	}
	if !logs.any(`"cluster"="`+name+`"`, "added") {
		t.Errorf("no log line says cluster %s was added", name)
	}
	if errs := srv.WatchErrors(); len(errs) > 0 {
		t.Errorf("watch errors: %v", errs)
	}

	remove(t, e.hostClient, cl)
	test.Eventually(t, kfPatience, name+" deleted", func() bool {
		_, err := srv.Status(name)
		return errors.Is(err, mccrserver.ErrClusterNotFound)
	})
	// The series go once the member has stopped, which may follow.
	test.Eventually(t, kfPatience, "mccr_cluster_ready of "+name+" gone", func() bool {
		_, ok := clusterReadyMetric(t, name)
		return !ok
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
