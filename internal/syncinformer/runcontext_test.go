package syncinformer

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"
)

// deriving is an informer whose run derives contexts from the one it is
// given, as a reflector does per watch, and reports them.
type deriving struct {
	toolscache.SharedIndexInformer
	n       int
	derived chan []context.Context
}

func (d *deriving) RunWithContext(ctx context.Context) {
	ctxs := make([]context.Context, 0, d.n)
	for range d.n {
		c, cancel := context.WithCancel(ctx)
		defer cancel()
		ctxs = append(ctxs, c)
	}
	if !InformerRun(ctx) {
		panic("the run's context is not an informer run's")
	}
	d.derived <- ctxs
	<-ctx.Done()
}

func wrapDeriving(n int) (toolscache.SharedIndexInformer, *deriving) {
	d := &deriving{n: n, derived: make(chan []context.Context, 1)}
	next := func(lw toolscache.ListerWatcher, obj kruntime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
		d.SharedIndexInformer = toolscache.NewSharedIndexInformer(lw, obj, resync, idx)
		return d
	}
	return Wrap(nil, next, nil)(fcache.NewFakeControllerSource(), &corev1.Pod{}, 0, toolscache.Indexers{}), d
}

// Contexts derived from an informer's run context, which controller-runtime
// makes from a stop channel, cost no goroutine, and end with the run.
func TestRunContextDerivesWithoutGoroutines(t *testing.T) {
	const n = 50
	inf, d := wrapDeriving(n)
	stop := make(chan struct{})
	before := runtime.NumGoroutine()
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(wait.ContextForChannel(stop))
	}()
	ctxs := <-d.derived
	if grew := runtime.NumGoroutine() - before; grew > 1 {
		t.Errorf("%d derived contexts cost %d goroutines besides the run's", n, grew-1)
	}
	for _, c := range ctxs {
		if c.Err() != nil {
			t.Fatal("a derived context ended before the run")
		}
	}
	close(stop)
	<-done
	for _, c := range ctxs {
		select {
		case <-c.Done():
			if !errors.Is(c.Err(), context.Canceled) {
				t.Errorf("derived context ended with %v", c.Err())
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a derived context outlived the run")
		}
	}
}

// A context derived once the run has returned ends at once; one canceled
// during the run leaves nothing registered.
func TestRunContextAfterStop(t *testing.T) {
	stop := make(chan struct{})
	rc := newRunContext(wait.ContextForChannel(stop))
	_, cancel := context.WithCancel(rc)
	cancel()
	rc.mu.Lock()
	left := len(rc.funcs)
	rc.mu.Unlock()
	if left != 0 {
		t.Errorf("%d functions registered after the derived context was canceled", left)
	}
	close(stop)
	rc.stop()
	late, lcancel := context.WithCancel(rc)
	defer lcancel()
	select {
	case <-late.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a context derived after the run did not end")
	}
}

// A run that returns before its stop channel closes (an informer run
// twice returns at once) leaves its derived contexts to end with the
// channel, canceled, never with a nil error.
func TestRunContextEarlyReturn(t *testing.T) {
	stop := make(chan struct{})
	rc := newRunContext(wait.ContextForChannel(stop))
	c, cancel := context.WithCancel(rc)
	defer cancel()
	rc.stop()
	if c.Err() != nil {
		t.Fatal("derived context ended before the stop channel closed")
	}
	close(stop)
	select {
	case <-c.Done():
		if !errors.Is(c.Err(), context.Canceled) {
			t.Errorf("derived context ended with %v", c.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("derived context did not end with the stop channel")
	}
}

// InformerRun holds for the run's context and contexts that only add
// values to it, not for a context with a Done of its own.
func TestInformerRun(t *testing.T) {
	rc := newRunContext(wait.ContextForChannel(make(chan struct{})))
	type key struct{}
	withValue := context.WithValue(rc, key{}, 1)
	child, cancel := context.WithCancel(rc)
	defer cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want bool
	}{
		{"run", rc, true},
		{"value", withValue, true},
		{"cancelable child", child, false},
		{"value of a child", context.WithValue(child, key{}, 2), false},
		{"unrelated", t.Context(), false},
	} {
		if got := InformerRun(tc.ctx); got != tc.want {
			t.Errorf("InformerRun(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
