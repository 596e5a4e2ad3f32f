package member

import (
	"sync"
	"sync/atomic"
)

// forbiddenKinds is the set of kinds (as client-go's reflectors describe
// them, "*v1.Secret") that a member's identity may not list or watch: a
// missing RBAC rule. Waiting for such a kind to sync would hold up every
// controller of the member (controller-runtime's sources wait for the whole
// cache) until the cache sync timeout restarts the member, over and over.
// Instead, the member's informers of a forbidden kind count as synced for
// those waits, reads of it fail with a Forbidden error instead of waiting
// forever, and the informer keeps retrying: once the rule is granted it
// syncs for real, the kind leaves the set, and its controller sees the
// objects as they arrive.
type forbiddenKinds struct {
	nonEmpty atomic.Bool // len(set) > 0, read on the hot path without the lock
	mu       sync.Mutex
	set      map[string]struct{}
	changed  chan struct{} // closed and replaced on every change
}

func newForbiddenKinds() *forbiddenKinds {
	return &forbiddenKinds{set: map[string]struct{}{}, changed: make(chan struct{})}
}

func (f *forbiddenKinds) has(kind string) bool {
	if !f.nonEmpty.Load() {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.set[kind]
	return ok
}

// changes returns a channel that closes at the next change of the set.
func (f *forbiddenKinds) changes() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

func (f *forbiddenKinds) forbid(kind string) { f.update(kind, true) }
func (f *forbiddenKinds) allow(kind string)  { f.update(kind, false) }

func (f *forbiddenKinds) update(kind string, forbidden bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.set[kind]; ok == forbidden {
		return
	}
	if forbidden {
		f.set[kind] = struct{}{}
	} else {
		delete(f.set, kind)
	}
	f.nonEmpty.Store(len(f.set) > 0)
	close(f.changed)
	f.changed = make(chan struct{})
}
