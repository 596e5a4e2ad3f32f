package syncinformer

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
)

type chanChecker chan struct{}

func (c chanChecker) Name() string          { return "test" }
func (c chanChecker) Done() <-chan struct{} { return c }

func (t *Tracker) held() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.checkers)
}

// The tracker lets go of the checkers it has seen done (a member adds one
// per informer and per handler for as long as it runs), and still waits
// for every one added meanwhile, from Settles that run at once, with
// Forget in between: none returns before every checker added before it
// started is done.
func TestTrackerDropsDone(t *testing.T) {
	var tr Tracker
	for range 100 {
		c := make(chanChecker)
		close(c)
		tr.AddOf(&corev1.Pod{}, c)
	}
	if !tr.Wait(t.Context()) {
		t.Fatal("Wait failed with every checker done")
	}
	if n := tr.held(); n != 0 {
		t.Fatalf("the tracker holds %d checkers, all done; want none", n)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	pending := make([]chanChecker, 0, 200)
	var wg sync.WaitGroup
	for n := range 200 {
		c := make(chanChecker)
		pending = append(pending, c)
		tr.AddOf(&corev1.ConfigMap{}, c)
		if n%20 == 0 {
			tr.Forget(func(kruntime.Object) bool { return false })
		}
		if n%10 == 0 {
			added := pending // every checker added so far must be done when Settle returns
			wg.Go(func() {
				if _, ok := tr.Settle(ctx); !ok {
					t.Error("Settle failed before its context ended")
					return
				}
				for _, c := range added {
					select {
					case <-c:
					default:
						t.Error("Settle returned before a checker added before it was done")
						return
					}
				}
			})
		}
	}
	for n, c := range pending {
		close(c)
		if n%7 == 0 {
			time.Sleep(time.Millisecond) // let waits see part of them done
		}
	}
	wg.Wait()
	if !tr.Wait(ctx) {
		t.Fatal("Wait failed with every checker done")
	}
	if n := tr.held(); n != 0 {
		t.Fatalf("the tracker holds %d checkers, all done; want none", n)
	}
}
