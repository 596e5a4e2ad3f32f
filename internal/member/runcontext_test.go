package member

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

type ctxKey string

// TestRunContext: the runnables' context carries BaseContext's values
// alone, and the end of Start's context reaches every context derived
// from it in the goroutine that ends it, with no goroutine relaying it.
func TestRunContext(t *testing.T) {
	leakCheck(t)
	start, end := context.WithCancel(context.WithValue(context.Background(), ctxKey("start"), "s"))
	defer end()
	base := context.WithValue(context.Background(), ctxKey("base"), "b")
	run, stop := context.WithCancel(runContext{Context: start, values: base})
	defer stop()

	if got := run.Value(ctxKey("base")); got != "b" {
		t.Errorf("BaseContext's value = %v, want b", got)
	}
	if got := run.Value(ctxKey("start")); got != nil {
		t.Errorf("Start's context's value reached the runnables: %v", got)
	}

	derived := make([]context.Context, 100)
	for i := range derived {
		ctx, cancel := context.WithTimeout(run, time.Hour)
		defer cancel()
		derived[i] = ctx
	}
	// The context package's relay would be a goroutine that this one
	// created in propagateCancel.
	buf := make([]byte, 1<<20)
	self, _, _ := strings.Cut(strings.TrimPrefix(string(buf[:runtime.Stack(buf, false)]), "goroutine "), " ")
	relay := "created by context.(*cancelCtx).propagateCancel in goroutine " + self + "\n"
	if stacks := string(buf[:runtime.Stack(buf, true)]); strings.Contains(stacks, relay) {
		t.Errorf("a goroutine relays the end to the runnables' context or one derived from it:\n%s", stacks)
	}

	end()
	// In this goroutine, as end returns: no wait.
	if run.Err() == nil {
		t.Fatal("the runnables' context did not end with Start's")
	}
	for i, ctx := range derived {
		if ctx.Err() == nil {
			t.Fatalf("derived context %d did not end with Start's", i)
		}
	}
}

// TestStopReachesRunnablesAtOnce: the end of Start's context ends the
// runnables' context as the cancel returns, and the Manager stops once
// they return.
func TestStopReachesRunnablesAtOnce(t *testing.T) {
	leakCheck(t)
	s := newFake(t, configMap("a", "x"))
	m := build(t, s, BuildOptions{Options: Options{BaseContext: func() context.Context {
		return context.WithValue(context.Background(), ctxKey("base"), "b")
	}}})
	got := make(chan context.Context, 1)
	if err := m.Add(manager.RunnableFunc(func(ctx context.Context) error {
		got <- ctx
		<-ctx.Done()
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	r := run(t, m)
	var ctx context.Context
	select {
	case ctx = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the runnable did not start")
	}
	if ctx.Value(ctxKey("base")) != "b" {
		t.Error("the runnable's context lacks BaseContext's value")
	}
	r.cancel()
	if ctx.Err() == nil {
		t.Error("the runnable's context had not ended when Start's cancel returned")
	}
	if err := r.wait(t, 10*time.Second); err != nil {
		t.Errorf("Start = %v, want nil", err)
	}
	waitClosed(t, m.Stopped(), 5*time.Second, "Stopped")
}
