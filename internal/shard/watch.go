package shard

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// watcher keeps the cache filled with the Group's Leases: a list, then a
// watch from it, then again. It does what a client-go informer does for
// this one purpose, with two differences that matter here: it retries
// every retry period (an informer backs off for up to 30 s after a control
// plane outage, and its view stays stale all that time), and it starts
// over at once when told its watch has gone quiet (restart).
type watcher struct {
	leases   coordclient.LeaseInterface
	selector string
	cache    *cache
	clock    clock.WithTicker
	period   time.Duration // between attempts after a failure
	timeout  time.Duration // of a list
	fails    *failures
	restarts chan struct{}
}

func newWatcher(leases coordclient.LeaseInterface, group string, c *cache, clk clock.WithTicker, period, timeout time.Duration, log logr.Logger) *watcher {
	return &watcher{
		leases: leases, selector: GroupLabel + "=" + GroupKey(group), cache: c, clock: clk, period: period, timeout: timeout,
		fails:    newFailures(log, clk, 0, "sharding: cannot list or watch the Leases", "sharding: watching the Leases again"),
		restarts: make(chan struct{}, 1),
	}
}

// restart ends the current watch; the next list comes at once.
func (w *watcher) restart() {
	select {
	case w.restarts <- struct{}{}:
	default:
	}
}

// run lists and watches until ctx ends.
func (w *watcher) run(ctx context.Context) {
	for ctx.Err() == nil {
		if w.once(ctx) {
			continue // the watch ended as watches do: list again at once
		}
		// Jitter, so that replicas do not come back in step.
		wait := w.period/2 + rand.N(w.period/2+1) //nolint:gosec // jitter, not a secret
		t := w.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C():
		case <-w.restarts:
		}
		t.Stop()
	}
}

// once lists, then watches until the watch ends; it reports whether the
// watch ended without an error.
func (w *watcher) once(ctx context.Context) bool {
	// A restart asked for before this list is answered by it.
	select {
	case <-w.restarts:
	default:
	}
	lctx, cancel := context.WithTimeout(ctx, w.timeout)
	list, err := w.leases.List(lctx, metav1.ListOptions{LabelSelector: w.selector})
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			w.fails.failed(err)
		}
		return false
	}
	w.cache.relist(list.Items)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A restart ends the watch even while it is being set up on a
	// connection that hangs.
	restarted := make(chan struct{})
	go func() {
		select {
		case <-w.restarts:
			close(restarted)
			cancel()
		case <-wctx.Done():
		}
	}()
	wi, err := w.leases.Watch(wctx, metav1.ListOptions{
		LabelSelector:       w.selector,
		ResourceVersion:     list.ResourceVersion,
		AllowWatchBookmarks: true,
		// The server ends a watch after this long; the next list starts
		// from scratch, so nothing lost on a watch that broke silently
		// lasts longer.
		TimeoutSeconds: ptr.To(int64(240 + rand.N(120))), //nolint:gosec // jitter, not a secret
	})
	if err != nil {
		select {
		case <-restarted:
			return true
		default:
		}
		if ctx.Err() == nil {
			w.fails.failed(err)
		}
		return false
	}
	defer wi.Stop()
	w.fails.ok()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-restarted:
			return true
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return true
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if l, ok := ev.Object.(*coordinationv1.Lease); ok {
					w.cache.watched(l)
				}
			case watch.Deleted:
				if l, ok := ev.Object.(*coordinationv1.Lease); ok {
					w.cache.watchedDelete(l)
				}
			case watch.Bookmark:
				w.cache.touch()
			case watch.Error:
				// Most often "too old a resource version": list again.
				return true
			}
		}
	}
}
