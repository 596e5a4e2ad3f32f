package server_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// TestFleetKindMapFuncReadsItsMember: a host controller watches the
// fleet's ConfigMaps (a kind no member controller watches, so FleetKind
// makes the member's informer and adds its handler before the first list)
// with a map function that reads that member's ConfigMaps through the
// fan-out client, with the ctx it is given (which names the member). The
// read returns, with members' default informers and with client-go's.
func TestFleetKindMapFuncReadsItsMember(t *testing.T) {
	ns := testNamespace(t)
	createConfigMap(t, "m1", ns, "a")
	for _, clientGo := range []bool{true, false} {
		t.Run(fmt.Sprintf("ClientGoInformers=%v", clientGo), func(t *testing.T) {
			srv, err := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{
				Logger:                 test.Logger(t),
				Metrics:                metricsserver.Options{BindAddress: "0"},
				HealthProbeBindAddress: "0",
				Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
			}, func(o *server.Options) { o.ClientGoInformers = clientGo })
			if err != nil {
				t.Fatal(err)
			}
			var reads, answered atomic.Int32
			mapFn := func(ctx context.Context, o client.Object) []reconcile.Request {
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				reads.Add(1)
				var l corev1.ConfigMapList
				if err := srv.GetClient().List(rctx, &l, client.InNamespace(ns)); err == nil {
					answered.Add(1)
				}
				return nil
			}
			if err := ctrl.NewControllerManagedBy(srv.GetHostManager()).
				Named(fmt.Sprintf("fleet-read-%s-%v", ns, clientGo)).
				WatchesRawSource(server.FleetKind(srv, &corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(mapFn))).
				Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
					return reconcile.Result{}, nil
				})); err != nil {
				t.Fatal(err)
			}
			test.Run(t, srv)
			addReady(t, srv, "m1")
			test.Eventually(t, 15*time.Second, "the map function was called", func() bool { return reads.Load() > 0 })
			test.Eventually(t, 10*time.Second, "the map function's read of its member returned", func() bool { return answered.Load() > 0 })
		})
	}
}
