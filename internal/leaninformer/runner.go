package leaninformer

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Runner builds informers that run detached, for a cache whose informers
// should cost no goroutine of their own: their Run registers them with a
// pump and returns at once, and they run until the Runner's context ends,
// the Runner stops, or they are stopped one by one (Informer.Stop).
//
// controller-runtime's cache runs each informer in a goroutine of its own
// until Run returns, plus one that merges the cache's stop channel with the
// informer's (syncs.MergeChans): two goroutines per kind for as long as the
// informer runs. Once Run has returned, controller-runtime forgets the
// informer: its RemoveInformer no longer reaches it, so the cache that
// uses a Runner stops the informers of a removed kind itself (StopWhere),
// and stops the Runner when it stops.
type Runner struct {
	parent context.Context // the one it was made with, for RunnerContext
	ctx    context.Context
	cancel context.CancelFunc
	scheme *runtime.Scheme

	mu        sync.Mutex
	stopped   bool
	informers []*Informer // started, and not yet done with
}

// NewRunner returns a Runner whose informers stop when ctx ends, with
// the default options.
func NewRunner(ctx context.Context) *Runner { return NewRunnerWithOptions(ctx, RunnerOptions{}) }

// NewRunnerWithOptions returns a Runner whose informers stop when ctx
// ends.
func NewRunnerWithOptions(ctx context.Context, opts RunnerOptions) *Runner {
	runCtx, cancel := context.WithCancel(ctx)
	r := &Runner{parent: ctx, ctx: runCtx, cancel: cancel, scheme: opts.Scheme}
	// One watch of the context for all the informers: each stops its own
	// pump's work (Informer.Stop).
	context.AfterFunc(runCtx, r.stopAll)
	return r
}

// stopAll stops the informers that have started; those that start later
// find the Runner's context ended.
func (r *Runner) stopAll() {
	r.mu.Lock()
	informers := slices.Clone(r.informers)
	r.mu.Unlock()
	for _, i := range informers {
		i.Stop()
	}
}

// New returns an informer that runs detached, with New's signature.
func (r *Runner) New(lw toolscache.ListerWatcher, exampleObject runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	i := newInformer(lw, exampleObject, resync, indexers, clock.RealClock{})
	r.own(i)
	return i
}

// own makes i run detached under r, reading its watch streams where it
// can (see take.go). Called before i starts.
func (r *Runner) own(i *Informer) {
	i.runner = r
	i.family = familyOf(i.example, r.scheme)
}

// add records a starting informer, and reports false if the Runner has
// stopped.
func (r *Runner) add(i *Informer) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return false
	}
	// Forget those that have stopped and have no handler call under way.
	r.informers = slices.DeleteFunc(r.informers, func(o *Informer) bool {
		return isClosed(o.released) && o.deliveries.idle()
	})
	r.informers = append(r.informers, i)
	return true
}

// StopWhere stops the running informers whose example object (the one
// they were built with) matches; it does not wait for their handler calls
// under way (Stop does).
func (r *Runner) StopWhere(match func(exampleObject runtime.Object) bool) {
	r.mu.Lock()
	informers := slices.Clone(r.informers)
	r.mu.Unlock()
	for _, i := range informers {
		if match(i.example) {
			i.Stop()
		}
	}
}

// Stop stops every informer of the Runner and returns once their
// handler calls under way have returned. Informers that start later stop
// at once. It must not be called from a handler of the Runner's
// informers.
func (r *Runner) Stop() {
	r.mu.Lock()
	r.stopped = true
	informers := r.informers
	r.informers = nil
	r.mu.Unlock()
	r.cancel()
	for _, i := range informers {
		i.Stop()
	}
	for _, i := range informers {
		i.wait()
	}
}

// Adopt makes inf run detached under r, if it is an informer of New (or
// wraps one, through Unwrap) that has not started, and reports whether it
// does. A cache that builds its informers with New adopts them as they are
// built.
func (r *Runner) Adopt(inf toolscache.SharedIndexInformer) bool {
	for {
		switch v := inf.(type) {
		case *Informer:
			v.mu.Lock()
			defer v.mu.Unlock()
			if v.started || (v.runner != nil && v.runner != r) {
				return false
			}
			r.own(v)
			return true
		case interface {
			Unwrap() toolscache.SharedIndexInformer
		}:
			inf = v.Unwrap()
		default:
			return false
		}
	}
}
