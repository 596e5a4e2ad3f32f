package server_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// byName enqueues the object's own namespace and name.
func byName(_ context.Context, o client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
}

// staysReady polls name's Status for d and fails the test at the first
// look that is not Ready, or counts a failure or a restart.
func staysReady(t *testing.T, srv *server.Server, name string, d time.Duration) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		st, _ := srv.Status(name)
		if st.Phase != server.PhaseReady || st.Failures != 0 || st.Restarts != 0 {
			t.Fatalf("%s: %s, failures %d, restarts %d, last error %v; want Ready throughout", name, st.Phase, st.Failures, st.Restarts, st.LastError)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// watchHost adds to b a watch of obj's kind in the host, as form says.
func watchHost(b *ctrl.Builder, srv *server.Server, form string, obj client.Object) *ctrl.Builder {
	if form == "HostKind" {
		return b.WatchesRawSource(server.HostKind(srv, obj, handler.EnqueueRequestsFromMapFunc(byName)))
	}
	return b.Watches(server.HostObject(srv, obj), handler.EnqueueRequestsFromMapFunc(byName))
}

// A member controller watches host Secrets, and the host's identity may
// not list them. The member is Ready and stays so (no failure, no
// restart, well past CacheSyncTimeout), the controller runs for its member
// kind, and Status.Unserved names the host kind. Once the host is granted
// the rule, the controller receives the host's Secrets, without a restart.
func TestHostKindForbiddenOnHost(t *testing.T) {
	for _, form := range []string{"HostKind", "HostObject"} {
		t.Run(form, func(t *testing.T) {
			ns := testNamespace(t)
			sa := "host-cm-only"
			tok, _ := configMapsOnly(t, "host", ns, sa)
			ignore := goleak.IgnoreCurrent()
			srv, err := server.NewServer(test.TokenConfig(fleet.Cluster("host").Config, tok), ctrl.Options{
				Logger:                 test.Logger(t),
				Metrics:                metricsserver.Options{BindAddress: "0"},
				HealthProbeBindAddress: "0",
				Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
			}, func(o *server.Options) {
				o.CacheSyncTimeout = 8 * time.Second
				o.Backoff.Duration = 100 * time.Millisecond
				o.Backoff.Cap = time.Second
			})
			if err != nil {
				t.Fatal(err)
			}
			rec := newTally()
			srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
				b := ctrl.NewControllerManagedBy(mgr).Named("hostsecrets-" + form + ns).For(&corev1.ConfigMap{})
				return watchHost(b, srv, form, &corev1.Secret{}).
					Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
						rec.add("m1", req.Name)
						return reconcile.Result{}, nil
					}))
			})
			stop := test.Run(t, srv)
			createConfigMap(t, "m1", ns, "visible")
			if err := srv.Add(fleet.Cluster("m1").Named); err != nil {
				t.Fatal(err)
			}
			test.Eventually(t, 30*time.Second, "the controller reconciles its member kind", func() bool { return rec.count("m1", "visible") > 0 })
			const want = "/v1, Kind=Secret (host)"
			test.Eventually(t, 15*time.Second, "Status.Unserved names the host kind", func() bool {
				st, _ := srv.Status("m1")
				for _, u := range st.Unserved {
					if u.Kind == want && strings.Contains(u.Reason, "host cluster's identity") {
						return true
					}
				}
				return false
			})
			staysReady(t, srv, "m1", 12*time.Second) // past CacheSyncTimeout

			// Grant the host the rule; a host Secret then reaches m1's controller.
			admin := adminClient(t, "host")
			role := &rbacv1.Role{
				ObjectMeta: metav1.ObjectMeta{Name: sa + "-secrets", Namespace: ns},
				Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}}},
			}
			binding := &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: sa + "-secrets", Namespace: ns},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
			}
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "from-host", Namespace: ns}}
			for _, o := range []client.Object{role, binding, secret} {
				if err := admin.Create(t.Context(), o); err != nil {
					t.Fatal(err)
				}
			}
			test.Eventually(t, 60*time.Second, "the host Secret reaches m1's controller once granted", func() bool { return rec.count("m1", "from-host") > 0 })
			test.Eventually(t, 10*time.Second, "Status.Unserved is empty once granted", func() bool {
				st, _ := srv.Status("m1")
				return len(st.Unserved) == 0
			})
			if st, _ := srv.Status("m1"); st.Phase != server.PhaseReady || st.Failures != 0 || st.Restarts != 0 {
				t.Errorf("m1 after the grant: %s, failures %d, restarts %d", st.Phase, st.Failures, st.Restarts)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			leakcheck.VerifyNone(t, ignore)
		})
	}
}

// A member controller watches a host kind whose CRD the host does not
// serve yet. The member is Ready and stays so, the controller's member
// other controllers run and this one waits; Status.WaitingFor names the
// host kind; once the CRD is installed on the host, the controller
// receives the host's objects, without a restart.
func TestHostKindCRDMissingOnHost(t *testing.T) {
	for _, form := range []string{"HostKind", "HostObject"} {
		t.Run(form, func(t *testing.T) {
			ns := testNamespace(t)
			crd, gvk := widgetCRD(ns)
			ignore := goleak.IgnoreCurrent()
			srv := newServer(t, ns, func(o *server.Options) { o.CacheSyncTimeout = 8 * time.Second })
			rec := newTally()
			other := newTally()
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gvk)
			srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
				b := ctrl.NewControllerManagedBy(mgr).Named("hostcrd-" + form + ns).For(&corev1.ConfigMap{})
				if err := watchHost(b, srv, form, u).
					Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
						rec.add("m1", req.Name)
						return reconcile.Result{}, nil
					})); err != nil {
					return err
				}
				// Another controller of the member, not waiting for anything.
				return ctrl.NewControllerManagedBy(mgr).Named("other-" + form + ns).For(&corev1.ConfigMap{}).
					Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
						other.add("m1", req.Name)
						return reconcile.Result{}, nil
					}))
			})
			stop := test.Run(t, srv)
			createConfigMap(t, "m1", ns, "visible")
			if err := srv.Add(fleet.Cluster("m1").Named); err != nil {
				t.Fatal(err)
			}
			test.Eventually(t, 30*time.Second, "the member's other controller reconciles", func() bool { return other.count("m1", "visible") > 0 })
			want := gvk.String() + " (host)"
			test.Eventually(t, 15*time.Second, "Status.WaitingFor names the host kind", func() bool {
				st, _ := srv.Status("m1")
				return slices.Contains(st.WaitingFor, want)
			})
			staysReady(t, srv, "m1", 12*time.Second) // past CacheSyncTimeout

			installed := time.Now()
			if err := test.InstallCRDObjects(fleet.Cluster("host").Config, crd); err != nil {
				t.Fatal(err)
			}
			w := &unstructured.Unstructured{}
			w.SetGroupVersionKind(gvk)
			w.SetNamespace(ns)
			w.SetName("w1")
			if err := adminClient(t, "host").Create(t.Context(), w); err != nil {
				t.Fatal(err)
			}
			test.Eventually(t, 30*time.Second, "the waiting controller receives the host's Widget", func() bool { return rec.count("m1", "w1") > 0 })
			t.Logf("CRD installed on the host → the member controller's reconcile: %s", time.Since(installed).Round(time.Millisecond))
			test.Eventually(t, 10*time.Second, "Status waits for nothing", func() bool {
				st, _ := srv.Status("m1")
				return len(st.WaitingFor) == 0
			})
			if st, _ := srv.Status("m1"); st.Phase != server.PhaseReady || st.Failures != 0 || st.Restarts != 0 {
				t.Errorf("m1 after the CRD came: %s, failures %d, restarts %d", st.Phase, st.Failures, st.Restarts)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			// envtest's CRD installer leaves its client's connection open.
			leakcheck.VerifyNone(t, ignore, goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"))
		})
	}
}
