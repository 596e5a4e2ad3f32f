package server_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// TestStartGateOffWhenNegative: a Server whose MaxConcurrentStarts is
// negative starts every member at once. Many members added together all
// reach their reconciler setups together (each setup waits until all of
// them are in theirs: with any bound below their number, and slots held as
// long as the setups run, they never would), and none is ever Queued on
// the way.
func TestStartGateOffWhenNegative(t *testing.T) {
	ns := testNamespace(t)
	// Were there a gate, its slots would not expire while the setups wait.
	server.SetStartSlotHold(t, time.Hour)
	ignore := goleak.IgnoreCurrent()
	r := startServer(t, ns, nil, func(o *server.Options) { o.MaxConcurrentStarts = -1 })

	const n = 16
	together := holdSetups(r.srv) // every member
	defer together.release()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("at-once-%d", i)
		if err := r.srv.Add(config.NewNamedConfig(names[i], fleet.Cluster(members[i%len(members)]).Config)); err != nil {
			t.Fatal(err)
		}
	}
	test.Eventually(t, 60*time.Second, "every member in its setups at once", func() bool {
		for _, name := range names {
			if st, err := r.srv.Status(name); err != nil || st.Phase == server.PhaseQueued {
				t.Fatalf("%s with MaxConcurrentStarts -1: %s, %v; want no member Queued (%d of %d in their setups)", name, st.Phase, err, together.entered.Load(), n)
			}
		}
		return together.entered.Load() >= n
	})
	together.release()
	waitReady(t, r.srv, names...)

	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	fleet.CloseConnections()
	leakcheck.VerifyNone(t, ignore)
}

// TestQueuedMemberWaitsForAStartSlot: with one start slot, a member whose
// start holds it (a reconciler setup that does not return yet) makes the
// next one wait. The waiting member says so in Status (Queued), a Delete
// of it returns at once and leaves nothing behind, a Delete of a running
// member does not wait for the slot, and the waiting member starts, and
// reconciles, once the slot frees.
func TestQueuedMemberWaitsForAStartSlot(t *testing.T) {
	ns := testNamespace(t)
	// The held slot must not expire while the test looks at the queue.
	server.SetStartSlotHold(t, time.Hour)
	ignore := goleak.IgnoreCurrent()
	r := startServer(t, ns, nil, func(o *server.Options) { o.MaxConcurrentStarts = 1 })
	addReady(t, r.srv, "m3") // runs, holding no slot

	held := holdSetups(r.srv, fleet.Cluster("m1").Config.Host)
	defer held.release()
	if err := r.srv.Add(fleet.Cluster("m1").Named); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 60*time.Second, "m1 in its setups", func() bool { return held.entered.Load() == 1 })
	if err := r.srv.Add(fleet.Cluster("m2").Named); err != nil {
		t.Fatal(err)
	}
	queued := func() {
		t.Helper()
		test.Eventually(t, 10*time.Second, "m2 Queued", func() bool {
			st, err := r.srv.Status("m2")
			return err == nil && st.Phase == server.PhaseQueued
		})
		if st, err := r.srv.Status("m1"); err != nil || st.Phase != server.PhaseStarting {
			t.Fatalf("m1, holding the slot: %s, %v; want Starting", st.Phase, err)
		}
	}
	queued()

	// A waiting member is deleted at once: it ran nothing.
	begin := time.Now()
	if err := r.srv.Delete("m2"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > time.Second {
		t.Errorf("Delete of a member waiting for a start slot took %s", took)
	}
	if _, err := r.srv.Status("m2"); !errors.Is(err, server.ErrClusterNotFound) {
		t.Fatalf("m2 after its Delete: %v, want ErrClusterNotFound", err)
	}
	// A running member stops without a slot, while the only one is held.
	if err := r.srv.Delete("m3"); err != nil {
		t.Fatal(err)
	}
	if st, err := r.srv.Status("m1"); err != nil || st.Phase != server.PhaseStarting {
		t.Fatalf("m1 after m3's Delete: %s, %v; want Starting (still holding the slot)", st.Phase, err)
	}

	// Added again, it waits again, and starts once m1 has synced.
	if err := r.srv.Add(fleet.Cluster("m2").Named); err != nil {
		t.Fatal(err)
	}
	queued()
	held.release()
	waitReady(t, r.srv, "m1", "m2")
	createConfigMap(t, "m2", ns, "after-queue")
	test.Eventually(t, 30*time.Second, "m2 reconciled", func() bool { return ackIn(t, "m2", ns, "after-queue") == "m2" })

	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	fleet.CloseConnections()
	leakcheck.VerifyNone(t, ignore)
}
