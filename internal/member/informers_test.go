package member

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestHandlerReadsItsKindBeforeSync: a handler added to a member's
// informer before its first list (as server.FleetKind attaches to the
// informer of a kind the member's controllers do not watch:
// GetInformer(BlockUntilSynced(false)), then AddEventHandler) reads that
// kind through the member's client while it is handed the initial list, as
// a map function or a predicate may. The read waits for the informer to
// sync, which it has once its store holds the list, with either kind of
// informer (leaninformer hands the list over in the goroutine that lists).
func TestHandlerReadsItsKindBeforeSync(t *testing.T) {
	for _, clientGo := range []bool{true, false} {
		t.Run(fmt.Sprintf("ClientGoInformers=%v", clientGo), func(t *testing.T) {
			s := newFake(t, configMap("a", "x"))
			m := build(t, s, BuildOptions{ClientGoInformers: clientGo})
			r := run(t, m)
			if !m.WaitForSync(syncCtx(t)) {
				t.Fatal("WaitForSync = false")
			}
			// The informer's first list takes a moment, so that the
			// handler is there before it (it usually is anyway).
			s.SetLatency(300 * time.Millisecond)
			inf, err := m.GetCache().GetInformer(syncCtx(t), &corev1.ConfigMap{}, cache.BlockUntilSynced(false))
			if err != nil {
				t.Fatal(err)
			}
			readCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel() // releases a stuck handler before the Manager stops
			read := make(chan error, 1)
			if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(any) {
				var l corev1.ConfigMapList
				err := m.GetClient().List(readCtx, &l, client.InNamespace("a"))
				select {
				case read <- err:
				default:
				}
			}}); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-read:
				if err != nil {
					t.Errorf("a handler's read of its informer's kind = %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("a handler's read of its informer's kind did not return within 5s; informer synced: %v", inf.HasSynced())
			}
			cancel()
			if err := r.stop(t); err != nil {
				t.Errorf("Start = %v", err)
			}
		})
	}
}

// TestInformerWatchesEndWithLifetime: once a member's lifetime has ended
// (a Server's attempt ends it together with the Manager's ctx, on Delete,
// Update or a failure), its informers' watches end too, though the cache
// stops only after the runnables have returned (here one that ignores its
// ctx) or the graceful shutdown timeout has passed.
func TestInformerWatchesEndWithLifetime(t *testing.T) {
	s := newFake(t, configMap("a", "x"))
	lifetime, endLifetime := context.WithCancel(context.Background())
	defer endLifetime()
	r, slow := runSlowToStop(t, s, BuildOptions{Lifetime: lifetime})
	deadline := time.Now().Add(5 * time.Second)
	for s.OpenWatches() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the informer opened no watch")
		}
		time.Sleep(10 * time.Millisecond)
	}
	endLifetime()
	r.cancel()
	deadline = time.Now().Add(3 * time.Second)
	for s.OpenWatches() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d watches of the member still open 3s after its lifetime ended", s.OpenWatches())
		}
		time.Sleep(10 * time.Millisecond)
	}
	slow.let()
	_ = r.wait(t, 10*time.Second)
}
