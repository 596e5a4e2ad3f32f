package server_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// watchFleetConfigMaps registers, on srv's host, a controller whose
// FleetKind source records every ConfigMap event in the returned log, and
// each delete delivered with DeleteStateUnknown as "delete-unknown" too.
func watchFleetConfigMaps(t *testing.T, srv *server.Server, ns string) *eventLog {
	t.Helper()
	log := newEventLog()
	h := log.handler()
	marking := handler.Funcs{
		CreateFunc:  h.Create,
		UpdateFunc:  h.Update,
		GenericFunc: h.Generic,
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.DeleteStateUnknown {
				log.record(ctx, e.Object, "delete-unknown")
			}
			h.Delete(ctx, e, q)
		},
	}
	err := ctrl.NewControllerManagedBy(srv.GetHostManager()).Named("fleet-span-" + ns).
		WatchesRawSource(server.FleetKind(srv, &corev1.ConfigMap{}, marking)).
		Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil }))
	if err != nil {
		t.Fatal(err)
	}
	return log
}

func deleteConfigMap(t *testing.T, cluster, ns, name string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := adminClient(t, cluster).Delete(t.Context(), cm); err != nil {
		t.Fatalf("%s: %v", cluster, err)
	}
}

// checkSettled waits for the delete of "gone" in member (as cluster) that
// the new Manager could not see, then for a later marker, and checks that
// "kept", still there, got no delete and arrived again as a create.
func checkSettled(t *testing.T, log *eventLog, member, cluster, ns string) {
	t.Helper()
	test.Eventually(t, 60*time.Second, "delete of the object removed during the restart delivered", func() bool {
		return log.count(cluster, "gone", "delete-unknown") == 1
	})
	createConfigMap(t, member, ns, "marker")
	test.Eventually(t, 30*time.Second, "marker delivered", func() bool { return log.count(cluster, "marker", "create") == 1 })
	if n := log.count(cluster, "gone", "delete"); n != 1 {
		t.Errorf("delete of the removed object delivered %d times, want 1", n)
	}
	if n := log.count(cluster, "kept", "delete"); n != 0 {
		t.Errorf("an object still there was told deleted %d times", n)
	}
	if n := log.count(cluster, "kept", "create"); n != 2 {
		t.Errorf("an object still there was told created %d times over two Managers, want 2", n)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if log.bad > 0 {
		t.Errorf("%d handler calls had no cluster in ctx", log.bad)
	}
}

// TestFleetKindTellsDeletesAcrossAnUpdate: an object deleted while its
// member restarts for an Update is told deleted (DeleteStateUnknown) once
// the new Manager's informer has synced, as controller-runtime's Kind
// source tells an object that vanished across a relist; an object still
// there arrives as a create again and is not told deleted.
func TestFleetKindTellsDeletesAcrossAnUpdate(t *testing.T) {
	ns := testNamespace(t)
	srv := newServer(t, ns)
	log := watchFleetConfigMaps(t, srv, ns)
	stop := test.Run(t, srv)
	addReady(t, srv, "m2")
	createConfigMap(t, "m2", ns, "gone")
	createConfigMap(t, "m2", ns, "kept")
	test.Eventually(t, 30*time.Second, "objects delivered", func() bool {
		return log.count("m2", "gone", "create") == 1 && log.count("m2", "kept", "create") == 1
	})

	cfg := rest.CopyConfig(fleet.Cluster("m2").Config)
	cfg.UserAgent = "rotated"
	if err := srv.Update(config.NewNamedConfig("m2", cfg)); err != nil {
		t.Fatal(err)
	}
	// Update has returned: the old Manager has stopped, and the delete
	// reaches no informer of m2.
	deleteConfigMap(t, "m2", ns, "gone")
	waitReady(t, srv, "m2")
	checkSettled(t, log, "m2", "m2", ns)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// gate fails every request but the reach probe's (GET /version) while
// closed, as if the member's API server answered nothing else: an
// informer of the member's Manager can neither list nor watch.
type gate struct{ closed atomic.Bool }

var errGateClosed = errors.New("gate closed")

func (g *gate) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if g.closed.Load() && req.URL.Path != "/version" {
			return nil, errGateClosed
		}
		return rt.RoundTrip(req)
	})
}

// TestFleetKindTellsDeletesAcrossAReconnect: the restart of a member whose
// API server answers again after an outage (Unreachable, then restarted
// with fresh lists) tells the objects deleted meanwhile as deleted, as an
// Update does. The member's old informers are kept from seeing the delete
// (their requests fail) until the old Manager has stopped.
func TestFleetKindTellsDeletesAcrossAReconnect(t *testing.T) {
	ns := testNamespace(t)
	proxy, err := test.StartFaultProxy(fleet.Cluster("m3").Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	srv := newServer(t, ns, func(o *server.Options) {
		o.ReachProbeInterval = reachInterval
		o.ReachProbeTimeout = reachTimeout
	})
	log := watchFleetConfigMaps(t, srv, ns)
	stop := test.Run(t, srv)
	const name = "span-far"
	g := &gate{}
	cfg := proxy.Config()
	cfg.WrapTransport = g.wrap
	if err := srv.Add(config.NewNamedConfig(name, cfg)); err != nil {
		t.Fatal(err)
	}
	waitReady(t, srv, name)
	createConfigMap(t, "m3", ns, "gone")
	createConfigMap(t, "m3", ns, "kept")
	test.Eventually(t, 30*time.Second, "objects delivered", func() bool {
		return log.count(name, "gone", "create") == 1 && log.count(name, "kept", "create") == 1
	})

	// The outage: open watches are reset and the probe refused.
	g.closed.Store(true)
	proxy.Refuse()
	test.Eventually(t, reachInterval+reachTimeout+reachSlack, "member Unreachable", func() bool {
		st, _ := srv.Status(name)
		return st.Phase == server.PhaseUnreachable
	})
	deleteConfigMap(t, "m3", ns, "gone")
	if err := proxy.Pass(); err != nil {
		t.Fatal(err)
	}
	// The probe answers: the member restarts. Once its next start has
	// begun, the old Manager has stopped; the new one may read.
	test.Eventually(t, 30*time.Second, "member restarting", func() bool {
		st, _ := srv.Status(name)
		return st.Phase != server.PhaseUnreachable && st.Restarts > 0
	})
	g.closed.Store(false)
	waitReady(t, srv, name)
	checkSettled(t, log, "m3", name, ns)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
