package member

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/internal/leaninformer"
)

// unsyncedLooks is a leaninformer that counts the looks at HasSynced that
// found it not synced. controller-runtime's WaitForCacheSync looks at
// every informer of the cache once at once, then every 100ms while one
// has not synced: a look that finds one unsynced is a 100ms poll.
type unsyncedLooks struct {
	toolscache.SharedIndexInformer
	looks *atomic.Int32
}

func (u *unsyncedLooks) HasSynced() bool {
	ok := u.SharedIndexInformer.HasSynced()
	if !ok {
		u.looks.Add(1)
	}
	return ok
}

func (u *unsyncedLooks) Unwrap() toolscache.SharedIndexInformer { return u.SharedIndexInformer }

func (u *unsyncedLooks) RunsDetached() bool {
	return u.SharedIndexInformer.(interface{ RunsDetached() bool }).RunsDetached()
}

// TestTenKindsSyncWithoutPolling: a member whose controller watches ten
// kinds reaches its first Reconcile as one that watches one does: its
// sources start their informers one after another, and none of their
// waits for the cache falls into client-go's 100ms polling for an
// informer another source added meanwhile.
func TestTenKindsSyncWithoutPolling(t *testing.T) {
	cl := apiServer(t)
	leakCheck(t)
	cfg, admin := onAPIServer(t, cl)
	ctx := t.Context()
	const ns = "tenkinds-nopoll"
	if err := admin.Create(ctx, namespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, kc := range tenKinds {
		if err := admin.Create(ctx, kc.obj(ns, "x")); err != nil {
			t.Fatal(err)
		}
	}
	const members = 10
	var looks atomic.Int32
	took := make([]time.Duration, 0, members)
	for n := range members {
		m := buildOn(t, cfg, BuildOptions{Cluster: func(co *cluster.Options) {
			co.Cache.NewInformer = func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
				return &unsyncedLooks{SharedIndexInformer: leaninformer.New(lw, obj, resync, idx), looks: &looks}
			}
		}})
		reconciled := make(chan struct{})
		var once atomic.Bool
		b := ctrl.NewControllerManagedBy(m).Named(fmt.Sprintf("tenkinds%d", n)).For(tenKinds[0].obj("", ""))
		for _, kc := range tenKinds[1:] {
			b = b.Watches(kc.obj("", ""), &handler.EnqueueRequestForObject{})
		}
		if err := b.Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
			if once.CompareAndSwap(false, true) {
				close(reconciled)
			}
			return reconcile.Result{}, nil
		})); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		r := run(t, m)
		waitClosed(t, reconciled, 30*time.Second, "the first Reconcile")
		took = append(took, time.Since(start))
		if err := r.stop(t); err != nil {
			t.Errorf("Start = %v", err)
		}
	}
	slices.Sort(took)
	t.Logf("start → first Reconcile with ten kinds, %d members one after another: median %v, max %v", members, took[members/2], took[members-1])
	if n := looks.Load(); n != 0 {
		t.Errorf("the cache's sync check found an informer not synced %d times: each costs a 100ms poll", n)
	}
}
