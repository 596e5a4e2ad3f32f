package member

import (
	"context"
	"fmt"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/internal/leaninformer"
)

// unsyncedLooks is a leaninformer that counts the looks at HasSynced that
// found it not synced. controller-runtime's WaitForCacheSync looks at
// every informer of the cache once at once, then every 100ms while one
// has not synced: a look that finds one unsynced is a 100ms poll.
type unsyncedLooks struct {
	toolscache.SharedIndexInformer
	looks *polls
}

func (u *unsyncedLooks) HasSynced() bool {
	ok := u.SharedIndexInformer.HasSynced()
	if inClientGoPoll() {
		u.looks.look(ok)
	}
	return ok
}

// polls counts the 100ms waits of client-go's WaitForCacheSync: it stops
// looking at the first informer it finds unsynced and looks again 100ms
// later, in the same goroutine, so a goroutine that looks again after a
// look that found one unsynced has waited. (A look that finds one unsynced
// and is then abandoned, as the member cache abandons the check when an
// informer is added meanwhile, costs nothing and is not counted.)
type polls struct {
	mu      sync.Mutex
	pending map[string]bool // goroutines whose last look found one unsynced
	n       int
}

func (p *polls) look(synced bool) {
	g := goroutineID()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending[g] {
		p.n++
	}
	p.pending[g] = !synced
}

func (p *polls) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// goroutineID is the calling goroutine's number, from its stack's header
// ("goroutine 42 [running]:").
func goroutineID() string {
	b := make([]byte, 64)
	b = b[:goruntime.Stack(b, false)]
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

// inClientGoPoll reports whether the caller is client-go's
// WaitForCacheSync, whose look that finds an informer unsynced is followed
// by a 100ms wait. Other looks (the cache's own, before it waits on the
// informer's sync channel) cost nothing and are not counted.
func inClientGoPoll() bool {
	pcs := make([]uintptr, 64)
	frames := goruntime.CallersFrames(pcs[:goruntime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, "k8s.io/client-go/tools/cache.WaitForCacheSync") ||
			strings.HasPrefix(f.Function, "k8s.io/client-go/tools/cache.WaitForNamedCacheSync") {
			return true
		}
		if !more {
			return false
		}
	}
}

func (u *unsyncedLooks) Unwrap() toolscache.SharedIndexInformer { return u.SharedIndexInformer }

func (u *unsyncedLooks) RunsDetached() bool {
	return u.SharedIndexInformer.(interface{ RunsDetached() bool }).RunsDetached()
}

// tenKindsRuns keeps controller names unique across runs (-count).
var tenKindsRuns atomic.Int32

// TestTenKindsSyncWithoutPolling: a member whose controller watches ten
// kinds reaches its first Reconcile as one that watches one does: its
// sources start their informers one after another, and none of their
// waits for the cache falls into client-go's 100ms polling for an
// informer another source added meanwhile.
func TestTenKindsSyncWithoutPolling(t *testing.T) {
	cl := apiServer(t)
	leakcheck.Cleanup(t)
	cfg, admin := onAPIServer(t, cl)
	ctx := t.Context()
	const ns = "tenkinds-nopoll"
	// The API server is the package's: a second run (-count) finds them.
	if err := admin.Create(ctx, namespace(ns)); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, kc := range tenKinds {
		if err := admin.Create(ctx, kc.obj(ns, "x")); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	const members = 10
	looks := &polls{pending: map[string]bool{}}
	took := make([]time.Duration, 0, members)
	for range members {
		m := buildOn(t, cfg, BuildOptions{Cluster: func(co *cluster.Options) {
			co.Cache.NewInformer = func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
				return &unsyncedLooks{SharedIndexInformer: leaninformer.New(lw, obj, resync, idx), looks: looks}
			}
		}})
		reconciled := make(chan struct{})
		var once atomic.Bool
		b := ctrl.NewControllerManagedBy(m).Named(fmt.Sprintf("tenkinds%d", tenKindsRuns.Add(1))).For(tenKinds[0].obj("", ""))
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
	if n := looks.count(); n != 0 {
		t.Errorf("the cache's sync check waited out client-go's 100ms poll %d times", n)
	}
}
