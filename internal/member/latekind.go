package member

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// Late kinds: a controller that watches a kind its member cluster does not
// serve yet (its CRD is not installed there).
//
// controller-runtime's Kind source asks the cache for the kind's informer
// every 10s, and the controller fails once its CacheSyncTimeout (2m by
// default) has passed; its Manager fails with it. A member of a fleet
// would never become Ready and restart over and over, its other
// controllers with it, for a CRD that is missing in one cluster or
// arrives a little after the controller.
//
// Instead, the Manager gives each runnable's warm-up a waiter in its ctx,
// which controller-runtime hands on to its sources' Start and from there
// to the cache's GetInformer. There, a kind the cluster does not serve is
// waited for: the kind is recorded (Manager.WaitingKinds), the waiter is
// marked so that WaitForSync does not wait for that runnable, and the REST
// mapping is retried (kindPollFirst to kindPollCap apart) until it exists;
// then the informer is made and GetInformer returns as usual. The
// controller starts within a poll of the CRD being served, with no restart
// of the member. A controller waits only while its sources' sync is not
// timed out: see DefaultControllerCacheSyncTimeout.
//
// Calls without a waiter in their ctx (a read, a GetInformer of the
// user's own, anything a reconciler does) fail at once as before: only a
// warm-up may wait. (controller-runtime also hands the warm-up's ctx to
// the sources' event handlers; a GetInformer made there waits too.)
// Controllers with warm-up turned off in their own options start their
// sources in Start: without a waiter, they keep controller-runtime's 10s
// polling, under the same CacheSyncTimeout.

const (
	// kindPollFirst and kindPollCap space the retries of a waited-for kind:
	// each is one discovery request (/apis/<group>/<version>) through the
	// REST mapper, per member, which may share its mapper, and the lock
	// held for the request, with the members of the same API server.
	kindPollFirst = time.Second
	kindPollCap   = 5 * time.Second
)

// waiterKey is the ctx key of a runnable's waiter.
type waiterKey struct{}

// waiter tells the Manager whether one of a runnable's sources waits for
// its kind to be served.
type waiter struct {
	// waiting and unserved are the reports of the runnable's Manager
	// (nil: none), for the sources of kinds another cache serves.
	waiting  *kindSet
	unserved *unservedKinds

	mu      sync.Mutex
	n       int           // sources waiting
	changed chan struct{} // closed and replaced when n becomes or stops being zero
}

func newWaiter() *waiter { return &waiter{changed: make(chan struct{})} }

// WaitForKind returns a ctx with which GetInformer of a member's cache
// waits for a kind the cluster does not serve yet (listed in WaitingKinds
// meanwhile), as a controller's source does, instead of failing; the wait
// ends with ctx or the member.
func WaitForKind(ctx context.Context) context.Context {
	return withWaiter(ctx, newWaiter())
}

func withWaiter(ctx context.Context, w *waiter) context.Context {
	return context.WithValue(ctx, waiterKey{}, w)
}

func waiterFrom(ctx context.Context) *waiter {
	w, _ := ctx.Value(waiterKey{}).(*waiter)
	return w
}

// state reports whether a source waits, and a channel closed when that
// changes.
func (w *waiter) state() (waiting bool, changed <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n > 0, w.changed
}

func (w *waiter) add(d int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	was := w.n > 0
	w.n += d
	if was != (w.n > 0) {
		close(w.changed)
		w.changed = make(chan struct{})
	}
}

// kindSet counts the sources waiting for each kind. Its lock is a leaf: it
// is never held while calling out. A nil *kindSet is empty.
type kindSet struct {
	// hook is told when a kind joins or leaves the set (set by Build,
	// before the set is used).
	hook *kindsHook

	mu    sync.Mutex
	kinds map[string]int
}

func newKindSet() *kindSet { return &kindSet{kinds: map[string]int{}} }

func (s *kindSet) add(kind string, d int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	_, was := s.kinds[kind]
	if s.kinds[kind] += d; s.kinds[kind] <= 0 {
		delete(s.kinds, kind)
	}
	_, is := s.kinds[kind]
	s.mu.Unlock()
	if was != is {
		s.hook.changed()
	}
}

// list returns the kinds, sorted; nil when there are none.
func (s *kindSet) list() []string {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	if len(s.kinds) == 0 {
		s.mu.Unlock()
		return nil
	}
	kinds := make([]string, 0, len(s.kinds))
	for k := range s.kinds {
		kinds = append(kinds, k)
	}
	s.mu.Unlock()
	slices.Sort(kinds)
	return kinds
}

// awaitKind is called by a GetInformer for gvk that failed with err, a
// no-match error, with w in its ctx. It waits until the REST mapper knows
// gvk and get succeeds, and returns what get returned then; or returns
// err once ctx or the member's lifetime ends.
func (c *syncNotifyingCache) awaitKind(ctx context.Context, w *waiter, gvk schema.GroupVersionKind, get func() (cache.Informer, error), err error) (cache.Informer, error) {
	// Ask the mapper first: a GetInformer that misses holds the informer
	// map's lock (which every read takes) for the discovery request. Any
	// error of the mapper's (discovery failing for a while) is one more
	// reason to wait.
	mapped := func() bool {
		if c.mapper == nil {
			return true
		}
		_, merr := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		return merr == nil
	}
	log := c.log.WithValues("kind", gvk.String())
	log.Info("kind not served by the cluster (is its CRD installed?); its controller waits for it while the others run")
	return awaitServed(ctx, c.lifetime, w, c.waiting, log, gvk.String(), mapped, get, err)
}

// awaitServed waits, with w marked as waiting and kind listed in waiting,
// until mapped (nil: always) and get succeed or fail otherwise than with
// a no-match error, and returns what get returned then; or returns err
// once ctx or lifetime ends.
func awaitServed(ctx, lifetime context.Context, w *waiter, waiting *kindSet, log logr.Logger, kind string, mapped func() bool, get func() (cache.Informer, error), err error) (cache.Informer, error) {
	waiting.add(kind, 1)
	w.add(1)
	defer func() {
		w.add(-1)
		waiting.add(kind, -1)
	}()
	begin := time.Now()
	t := time.NewTimer(kindPollFirst)
	defer t.Stop()
	for delay := kindPollFirst; ; {
		select {
		case <-ctx.Done():
			return nil, err
		case <-lifetime.Done():
			return nil, err
		case <-t.C:
		}
		if mapped == nil || mapped() {
			i, gerr := get()
			if !meta.IsNoMatchError(gerr) {
				if gerr == nil {
					log.Info("kind served now; its controller starts", "waited", time.Since(begin).Round(time.Millisecond))
				}
				return i, gerr
			}
			err = gerr
		}
		delay = min(2*delay, kindPollCap)
		// Jittered, so that the members of one API server do not ask it
		// in step.
		t.Reset(delay - rand.N(delay/10)) //nolint:gosec // G404: jitter, not a secret
	}
}
