package configwatcher_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/known"
	mccrserver "github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// firstReconciles records when each cluster first reconciled.
type firstReconciles struct {
	mu    sync.Mutex
	first map[string]time.Time
}

func (f *firstReconciles) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	name, _ := known.ClusterFrom(ctx)
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.first[name]; !ok {
		f.first[name] = now
	}
	return reconcile.Result{}, nil
}

func (f *firstReconciles) at(name string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.first[name]
	return t, ok
}

// throughServer measures, with a Server fed by w, the time from ready()
// (the object that lists the cluster becoming usable) to the first
// Reconcile in the member, and from rotate() (its credential replaced by
// the env's rotated token) to the member Ready on a Manager that uses it.
func (e *secretEnv) throughServer(t *testing.T, what string, w configwatcher.ConfigWatcher, name string, ready, rotate func() time.Time) {
	t.Helper()
	srv := newWatchingServer(t, e.host.Config, testr.New(t), w)
	rec := &firstReconciles{first: map[string]time.Time{}}
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("latency").For(&corev1.Namespace{}).Complete(rec)
	})
	stop := test.Run(t, srv)

	at := ready()
	test.Eventually(t, kfPatience, name+" reconciles", func() bool { _, ok := rec.at(name); return ok })
	first, _ := rec.at(name)
	at2 := rotate()
	test.Eventually(t, kfPatience, name+" Ready with the rotated token", func() bool {
		st, err := srv.Status(name)
		if err != nil || st.Phase != mccrserver.PhaseReady {
			return false
		}
		mgr, err := srv.GetManager(name)
		return err == nil && mgr.GetConfig().BearerToken == e.rotated
	})
	t.Logf("figure: %s ready → first reconcile in the member: %s; credential rotated → member Ready using it: %s",
		what, first.Sub(at).Round(time.Millisecond), time.Since(at2).Round(time.Millisecond))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func (e *secretEnv) testThroughServer(t *testing.T) {
	for _, format := range []string{"kubeconfig", "argocd"} {
		t.Run(format, func(t *testing.T) {
			ns := e.namespace(t)
			opts := []configwatcher.SecretOption{configwatcher.WithSecretNamespace(ns)}
			lbl, name := mcrLabel, "east"
			data := func(token string) map[string][]byte {
				return map[string][]byte{configwatcher.DefaultSecretKey: e.kubeconfigFor(t, token)}
			}
			if format == "argocd" {
				opts = append(opts, configwatcher.ArgoCDFormat())
				lbl, name = argoLabel, "west"
				data = func(token string) map[string][]byte {
					return map[string][]byte{"name": []byte(name), "server": []byte(e.member.Config.Host), "config": e.argoConfig(t, token, nil)}
				}
			}
			w, err := configwatcher.NewSecretWatcher(e.host.Config, opts...)
			if err != nil {
				t.Fatal(err)
			}
			var s *corev1.Secret
			e.throughServer(t, format+" Secret", w, name,
				func() time.Time { at := time.Now(); s = e.create(t, ns, name, lbl, data(e.token)); return at },
				func() time.Time {
					at := time.Now()
					e.update(t, s, func(s *corev1.Secret) { s.Data = data(e.rotated) })
					return at
				})
		})
	}
}

func (e *clusterAPIEnv) testThroughServer(t *testing.T) {
	ns := e.namespace(t)
	w, err := configwatcher.NewClusterAPIWatcher(e.host.Config, configwatcher.WithClusterAPINamespaces(ns))
	if err != nil {
		t.Fatal(err)
	}
	s := kubeconfigSecret(ns, "wl", map[string][]byte{"value": e.kubeconfigFor(t, e.token)})
	cl := capiCluster(ns, "wl", "v1beta2")
	create(t, e.hostClient, s, cl)
	e.throughServer(t, "Cluster API Cluster", w, ns+"/wl",
		func() time.Time { return setStatus(t, e.hostClient, cl, initializedV1Beta2) },
		func() time.Time {
			at := time.Now()
			e.update(t, s, func(s *corev1.Secret) { s.Data["value"] = e.kubeconfigFor(t, e.rotated) })
			return at
		})
}
