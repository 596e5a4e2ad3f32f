package syncinformer

import (
	"sync"
	"sync/atomic"
)

// Kinds is the set of kinds (as client-go's reflectors describe them,
// "*v1.Secret") that a cache's identity may not list or watch: a missing
// RBAC rule. Waiting for such a kind to sync would hold up every
// controller of the member (controller-runtime's sources wait for the whole
// cache) until the cache sync timeout restarts the member, over and over.
// Instead, the informers of a forbidden kind that Wrap makes count as
// synced for those waits (the member's cache also refuses reads of it
// rather than wait forever), and the informer keeps retrying: once the rule
// is granted it syncs for real, the kind leaves the set, and its controller
// sees the objects as they arrive. A nil *Kinds is an empty set.
type Kinds struct {
	nonEmpty atomic.Bool // len(set) > 0, read on the hot path without the lock
	mu       sync.Mutex
	set      map[string]struct{}
	changed  chan struct{} // closed and replaced on every change
	onChange func()        // called after every change, unlocked
	// notify are called after every change too, unlocked (Notify).
	notify map[*func()]struct{}
}

// NewKinds returns an empty set.
func NewKinds() *Kinds {
	return &Kinds{set: map[string]struct{}{}, changed: make(chan struct{})}
}

// Has reports whether kind is in the set.
func (f *Kinds) Has(kind string) bool {
	if f == nil {
		return false
	}
	if !f.nonEmpty.Load() {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.set[kind]
	return ok
}

// Changes returns a channel that closes at the next change of the set (nil,
// never closing, for a nil set).
func (f *Kinds) Changes() <-chan struct{} {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

// OnChange makes fn called after every change of the set, with the set's
// lock released (fn may read the set), on the goroutine that changed it;
// nil stops the calls. For an owner that keeps a report of the set and has
// no goroutine to wait on Changes.
func (f *Kinds) OnChange(fn func()) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onChange = fn
}

// Forbid adds kind to the set.
func (f *Kinds) Forbid(kind string) { f.update(kind, true) }

// Allow removes kind from the set.
func (f *Kinds) Allow(kind string) { f.update(kind, false) }

func (f *Kinds) update(kind string, forbidden bool) {
	if f == nil {
		return
	}
	f.mu.Lock()
	if _, ok := f.set[kind]; ok == forbidden {
		f.mu.Unlock()
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
	fn := f.onChange
	fns := make([]func(), 0, len(f.notify))
	for n := range f.notify {
		fns = append(fns, *n)
	}
	f.mu.Unlock()
	if fn != nil {
		fn()
	}
	for _, n := range fns {
		n()
	}
}

// Notify makes fn called after every change of the set, as OnChange's
// function is, until stop is called; any number of them may be set. For a
// set that several owners report (the host's forbidden kinds, which every
// member watching one of them shows).
func (f *Kinds) Notify(fn func()) (stop func()) {
	if f == nil || fn == nil {
		return func() {}
	}
	key := &fn
	f.mu.Lock()
	if f.notify == nil {
		f.notify = map[*func()]struct{}{}
	}
	f.notify[key] = struct{}{}
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		delete(f.notify, key)
		f.mu.Unlock()
	}
}
