package shard

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func versioned(l *coordinationv1.Lease, rv string) *coordinationv1.Lease {
	l = l.DeepCopy()
	l.UID, l.ResourceVersion = "uid-1", rv
	return l
}

// TestCacheKeepsTheLaterVersion: a write's answer that arrives after the
// watch delivered a later version of the Lease (another replica took the
// Lease this one released) does not replace it, whichever way the two
// arrive; nor does a relist that lags.
func TestCacheKeepsTheLaterVersion(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	c := newCache(clk, "fleet", time.Second, 2*time.Second, nil)
	released := versioned(groupLease("c1", ""), "100")
	taken := versioned(groupLease("c1", "b"), "105")

	c.watched(released)
	c.watched(taken)
	c.written(released) // the release's answer, late
	if e, _ := c.get("c1"); e.lease.ResourceVersion != "105" || e.rec.holder != "b" {
		t.Fatalf("after a late write answer: holder %q at %s, want b at 105", e.rec.holder, e.lease.ResourceVersion)
	}
	c.relist([]coordinationv1.Lease{*released})
	if e, ok := c.get("c1"); ok && e.lease.ResourceVersion != "105" {
		t.Fatalf("after a lagging relist: version %s, want 105 (or none)", e.lease.ResourceVersion)
	}

	// The answer first and the watch after: the later version wins too.
	c2 := newCache(clk, "fleet", time.Second, 2*time.Second, nil)
	c2.written(taken)
	c2.watched(released)
	if e, _ := c2.get("c1"); e.lease.ResourceVersion != "105" {
		t.Fatalf("a lagging watch replaced a write's answer: version %s, want 105", e.lease.ResourceVersion)
	}

	// A Lease deleted and created again (another UID) is not compared.
	again := versioned(groupLease("c1", "c"), "90")
	again.UID = "uid-2"
	c2.written(again)
	if e, _ := c2.get("c1"); e.rec.holder != "c" {
		t.Fatalf("a new Lease of the same name was refused: holder %q", e.rec.holder)
	}
}

// TestTombstoneTellsTheLastRenewal: the Lease of a replica that died and
// was removed still tells, for a while after its claim ended, when it last
// renewed: the time its clusters went unowned counts from then.
func TestTombstoneTellsTheLastRenewal(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	c := newCache(clk, "fleet", time.Second, 2*time.Second, nil)
	renewed := clk.Now()
	l := versioned(groupLease(ReplicaLeaseName("fleet", "a"), "a"), "7")
	l.Spec.LeaseDurationSeconds = ptr.To(int32(8))
	l.Spec.RenewTime = &metav1.MicroTime{Time: renewed}
	c.watched(l)
	clk.Step(9 * time.Second) // its claim ended; a survivor removes its Lease
	c.watchedDelete(l)
	c.prune(clk.Now(), 8*time.Second)
	e, ok := c.get(l.Name)
	if !ok || !e.gone || !e.rec.renew.Equal(renewed) {
		t.Fatalf("tombstone right after the delete: %+v (present %v), want its last renewal", e.rec, ok)
	}
	clk.Step(8 * time.Second)
	c.prune(clk.Now(), 8*time.Second)
	if _, ok := c.get(l.Name); ok {
		t.Fatal("tombstone kept past twice its declared duration")
	}
}

// TestCacheTakesARestoredLease: etcd restored from a backup serves a Lease
// at a version that compares lower than one seen before. A read of it
// wins, and the watch's later versions of it are taken from then on, so
// that the replica's writes stop conflicting.
func TestCacheTakesARestoredLease(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	c := newCache(clk, "fleet", time.Second, 2*time.Second, nil)
	c.watched(versioned(groupLease("c1", "a"), "5000"))
	c.fresh(versioned(groupLease("c1", "b"), "120"), clk.Now()) // read after a conflict
	if e, _ := c.get("c1"); e.rec.holder != "b" || e.lease.ResourceVersion != "120" {
		t.Fatalf("after reading the restored Lease: holder %q at %s, want b at 120", e.rec.holder, e.lease.ResourceVersion)
	}
	c.watched(versioned(groupLease("c1", "c"), "121"))
	if e, _ := c.get("c1"); e.rec.holder != "c" {
		t.Fatalf("the watch's next version after the restore was refused: holder %q", e.rec.holder)
	}
}

// TestCacheKeepsAVersionThatArrivedDuringARead: a read sent before the
// watch delivered a later version (another replica's release of a
// cluster's Lease) answers with the version before it; that answer must
// not replace the later one, or the replica would wait on a holder that
// has let go until its watch relists. A read sent after it wins, as after
// a restore.
func TestCacheKeepsAVersionThatArrivedDuringARead(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	c := newCache(clk, "fleet", time.Second, 2*time.Second, nil)
	c.watched(versioned(groupLease("c1", "b"), "100"))
	sent := clk.Now()
	clk.Step(time.Millisecond)
	c.watched(versioned(groupLease("c1", ""), "101")) // released meanwhile
	c.fresh(versioned(groupLease("c1", "b"), "100"), sent)
	if e, _ := c.get("c1"); e.rec.holder != "" || e.lease.ResourceVersion != "101" {
		t.Fatalf("a read's older answer replaced the release: holder %q at %s", e.rec.holder, e.lease.ResourceVersion)
	}
	clk.Step(time.Millisecond)
	c.fresh(versioned(groupLease("c1", "x"), "50"), clk.Now()) // restored, read after
	if e, _ := c.get("c1"); e.rec.holder != "x" {
		t.Fatalf("a read sent after the last version did not win: holder %q", e.rec.holder)
	}
}
