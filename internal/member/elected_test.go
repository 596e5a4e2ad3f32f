package member

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/internal/leakcheck"
)

// electionRunnable is a runnable that needs leader election (as a
// controller does) and says when it started.
type electionRunnable struct{ started chan struct{} }

func (r electionRunnable) Start(ctx context.Context) error {
	close(r.started)
	<-ctx.Done()
	return nil
}

// TestElectedHoldsBackLeaderElectionRunnables: with Options.Elected open,
// the member syncs (its caches, its controllers' warm-ups), serves cached
// reads and runs the runnables that need no leader election, while its
// controllers and other leader-election runnables wait; closing Elected
// starts them, those added later too. Stopping before the election ends
// the waiting runnables without starting them.
func TestElectedHoldsBackLeaderElectionRunnables(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newFake(t, configMap("a", "x"))
	elected := make(chan struct{})
	opts := warmupOptions()
	opts.Elected = elected
	m := build(t, s, opts)
	if m.Elected() != (<-chan struct{})(elected) {
		t.Fatal("Elected() is not Options.Elected")
	}
	var reconciles atomic.Int32
	if err := ctrl.NewControllerManagedBy(m).Named("configmaps").For(&corev1.ConfigMap{}).
		Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
			reconciles.Add(1)
			return reconcile.Result{}, nil
		})); err != nil {
		t.Fatal(err)
	}
	main := electionRunnable{started: make(chan struct{})}
	others := make(chan struct{})
	if err := m.Add(main); err != nil {
		t.Fatal(err)
	}
	if err := m.Add(leaderless(func(ctx context.Context) error {
		close(others)
		<-ctx.Done()
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	r := run(t, m)

	if !m.WaitForSync(syncCtx(t)) {
		t.Fatal("WaitForSync = false before the election: a standby's member must sync")
	}
	var cm corev1.ConfigMap
	if err := m.GetClient().Get(context.Background(), client.ObjectKey{Namespace: "a", Name: "x"}, &cm); err != nil {
		t.Fatalf("cached Get before the election: %v", err)
	}
	waitClosed(t, others, 10*time.Second, "a runnable that needs no leader election starts before the election")
	// The informer has delivered the seeded object to the controller's
	// queue (the warm-up synced it); nothing may reconcile it yet.
	time.Sleep(300 * time.Millisecond) // a window for a wrong start; the assertion is below
	if n := reconciles.Load(); n != 0 {
		t.Fatalf("%d reconciles before the election", n)
	}
	if isClosed(main.started) {
		t.Fatal("a leader-election runnable started before the election")
	}

	close(elected)
	waitClosed(t, main.started, 10*time.Second, "the leader-election runnable starts once elected")
	deadline := time.Now().Add(10 * time.Second)
	for reconciles.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the controller did not reconcile once elected")
		}
		time.Sleep(10 * time.Millisecond)
	}
	late := electionRunnable{started: make(chan struct{})}
	if err := m.Add(late); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, late.started, 10*time.Second, "a leader-election runnable added once elected starts at once")
	if err := r.stop(t); err != nil {
		t.Errorf("Start = %v", err)
	}
}

// TestStopBeforeElection: a member stopped before its host is elected
// stops at once, and its held-back runnables never start.
func TestStopBeforeElection(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newFake(t, configMap("a", "x"))
	opts := warmupOptions()
	opts.Elected = make(chan struct{}) // never closed
	m := build(t, s, opts)
	held := electionRunnable{started: make(chan struct{})}
	if err := m.Add(held); err != nil {
		t.Fatal(err)
	}
	r := run(t, m)
	if !m.WaitForSync(syncCtx(t)) {
		t.Fatal("WaitForSync = false")
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Start = %v", err)
	}
	waitClosed(t, m.Stopped(), 10*time.Second, "Stopped")
	if isClosed(held.started) {
		t.Error("a held-back runnable started although the host was never elected")
	}
}
