package syncinformer

import (
	"context"
	"sync"
)

// runContext is the context an informer of Wrap runs under. controller-
// runtime hands an informer a context made from a stop channel, and each
// context derived from a context of that kind costs a goroutine of the
// context package, waiting for the channel, for as long as it lives (the
// reflector derives one per watch). A runContext tells the context package
// how to reach the contexts derived from it instead (AfterFunc): once the
// informer's run has returned, which it does when Done is closed, stop
// cancels the ones still alive.
//
// The informer's loops and its requests select on Done itself, so they end
// as soon as the channel closes; only derived contexts end when the run has
// returned. client-go's informer and reflector, and leaninformer's, wait
// for nothing that only the end of a derived context would release.
//
// A context that adds only values to a runContext costs a goroutine again
// when a cancelable context is derived from it (the context package looks
// for AfterFunc on the direct parent only): a member's transport asks
// InformerRun and sends such requests as they are.
type runContext struct {
	context.Context

	mu      sync.Mutex
	stopped bool
	next    int
	funcs   map[int]func()
}

type runContextKey struct{}

func newRunContext(parent context.Context) *runContext {
	return &runContext{Context: parent, funcs: map[int]func(){}}
}

// Value returns the runContext itself for runContextKey.
func (c *runContext) Value(key any) any {
	if key == (runContextKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// AfterFunc arranges for f to run once the informer's run has returned
// (at once, in a goroutine of its own, if it has); the returned function
// unregisters f. The context package calls it for each context derived
// from this one.
func (c *runContext) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		go f()
		return func() bool { return false }
	}
	id := c.next
	c.next++
	c.funcs[id] = f
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.funcs[id]
		delete(c.funcs, id)
		return ok
	}
}

// stop runs the functions registered with AfterFunc, once Done is closed:
// a derived context is canceled with its parent's error, so a run that
// returned early (it was run twice, or panicked) leaves them to a goroutine
// that waits for Done.
func (c *runContext) stop() {
	if c.Err() == nil {
		go func() {
			<-c.Done()
			c.stop()
		}()
		return
	}
	c.mu.Lock()
	funcs := c.funcs
	c.funcs, c.stopped = nil, true
	c.mu.Unlock()
	for _, f := range funcs {
		f()
	}
}

// InformerRun reports whether ctx is the context an informer of Wrap runs
// under, or adds only values to it: a request made with it ends when the
// informer stops (it selects on the same Done), and a cancelable context
// derived from it costs a goroutine unless ctx is the run's own context.
func InformerRun(ctx context.Context) bool {
	c, ok := ctx.Value(runContextKey{}).(*runContext)
	return ok && c.Done() == ctx.Done()
}
