package server_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// ctxBoundHandler is a FleetKind handler whose create of an object named
// "block" waits on its ctx, as an uncached Get on a slow API server or a
// rate limiter's Wait does.
type ctxBoundHandler struct{ entered, cancelled atomic.Bool }

func (h *ctxBoundHandler) funcs() handler.Funcs {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.Object.GetName() != "block" {
				return
			}
			h.entered.Store(true)
			select {
			case <-ctx.Done():
				h.cancelled.Store(true)
			case <-time.After(time.Minute):
			}
		},
	}
}

func newCtxBoundServer(t *testing.T, ns string, grace, stopTimeout time.Duration, h *ctxBoundHandler) *server.Server {
	t.Helper()
	srv, err := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{
		Logger:                  test.Logger(t),
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		GracefulShutdownTimeout: &grace,
		Cache:                   cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
	}, func(o *server.Options) { o.StopTimeout = stopTimeout })
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrl.NewControllerManagedBy(srv.GetHostManager()).Named("ctxbound-" + ns).
		WatchesRawSource(server.FleetKind(srv, &corev1.ConfigMap{}, h.funcs())).
		Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })); err != nil {
		t.Fatal(err)
	}
	return srv
}

// TestFleetKindHandlerCtxEndsWithItsMember: a FleetKind handler's ctx ends
// when its member leaves, as a member's own controllers' do: the member's
// stop waits for the handler calls under way, so with the host
// controller's ctx instead, Delete timed out and the name could not run
// again until the handler returned by itself.
func TestFleetKindHandlerCtxEndsWithItsMember(t *testing.T) {
	ns := testNamespace(t)
	h := &ctxBoundHandler{}
	srv := newCtxBoundServer(t, ns, 2*time.Second, 5*time.Second, h)
	test.Run(t, srv)
	addReady(t, srv, "m1")
	createConfigMap(t, "m1", ns, "block")
	test.Eventually(t, 30*time.Second, "the handler waits on its ctx", h.entered.Load)

	if err := srv.Delete("m1"); err != nil {
		t.Errorf("Delete of a member whose FleetKind handler waits on its ctx: %v", err)
	}
	if !h.cancelled.Load() {
		t.Error("the handler's ctx did not end with its member")
	}
	if err := srv.Add(fleet.Cluster("m1").Named); err != nil {
		t.Fatal(err)
	}
	waitReady(t, srv, "m1")
}

// TestFleetKindHandlerCtxLetsTheServerStop: the host Manager stops the
// members before its controllers; a member waiting for a FleetKind
// handler whose ctx ended only with the host controller made every stop
// run into the graceful shutdown timeout.
func TestFleetKindHandlerCtxLetsTheServerStop(t *testing.T) {
	ns := testNamespace(t)
	h := &ctxBoundHandler{}
	srv := newCtxBoundServer(t, ns, 10*time.Second, 10*time.Second, h)
	stop := test.Background(srv)
	addReady(t, srv, "m3")
	createConfigMap(t, "m3", ns, "block")
	test.Eventually(t, 30*time.Second, "the handler waits on its ctx", h.entered.Load)
	begin := time.Now()
	if err := stop(); err != nil {
		t.Errorf("stopping the Server while a FleetKind handler waits on its ctx: %v", err)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("the Server took %s to stop", took.Round(time.Millisecond))
	}
}
