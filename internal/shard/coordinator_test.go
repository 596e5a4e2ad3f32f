package shard

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// leave hands r's clusters over as a replica that stops gracefully does.
func (s *sim) leave(r *simReplica) {
	s.t.Helper()
	r.c.startLeaving()
	s.until(r.c.o.LeaseDuration, r.id+" hands its clusters over", r.c.handedOver)
	r.c.finishLeaving(context.Background())
	r.down = true
}

func (s *sim) load() map[string]int {
	l := map[string]int{}
	for _, rs := range s.rec.owners() {
		for _, id := range rs {
			l[id]++
		}
	}
	return l
}

func TestSimSplitsJoinsAndLeaves(t *testing.T) {
	s := newSim(t, 12)
	a := s.add("a", defaultTiming, Options{})
	s.add("b", defaultTiming, Options{})
	s.add("c", defaultTiming, Options{})
	s.until(30*time.Second, "settled with a share each", func() bool { return s.settled() && len(s.load()) == 3 })
	limit := int(math.Ceil(DefaultLoadFactor * 12 / 3))
	for id, n := range s.load() {
		if n > limit {
			t.Errorf("%s runs %d clusters, over %d", id, n, limit)
		}
	}
	s.leave(a)
	s.until(5*time.Second, "a's clusters run elsewhere", func() bool { return s.settled() && s.load()["a"] == 0 })
	s.add("d", defaultTiming, Options{})
	s.until(30*time.Second, "d runs its share", func() bool { return s.settled() && s.load()["d"] >= 3 })
	s.run(20 * time.Second)
	s.rec.noDoubles(t)
	if _, ok := s.store.items[ReplicaLeaseName("fleet", "a")]; ok {
		t.Error("a left its Lease behind")
	}
}

// TestSimHostOutage: the host API server is down (refused or hung) for a
// while, and when it answers again the first renewal of each replica is
// applied but its answer lost, and the replicas' watches lag for 30 s. Every cluster must run again on exactly one
// replica within RenewDeadline + 2 s of the host answering, and never on
// two at any time.
func TestSimHostOutage(t *testing.T) {
	tm := timing{8 * time.Second, 4 * time.Second, 2 * time.Second}
	for _, tc := range []struct {
		outage time.Duration
		mode   fault
	}{
		{12 * time.Second, refuse}, {40 * time.Second, refuse}, {5 * time.Minute, refuse},
		{12 * time.Second, hang}, {40 * time.Second, hang}, {5 * time.Minute, hang},
	} {
		t.Run(fmt.Sprintf("%s %s", map[fault]string{refuse: "refused", hang: "hung"}[tc.mode], tc.outage), func(t *testing.T) {
			s := newSim(t, 4)
			a, b := s.add("a", tm, Options{}), s.add("b", tm, Options{})
			s.until(30*time.Second, "balanced", s.balanced)
			for _, r := range []*simReplica{a, b} {
				r.leases.setFault(func(string, string) fault { return tc.mode })
			}
			s.run(tc.outage)
			for _, r := range []*simReplica{a, b} {
				lost := false
				r.leases.setFault(func(verb, _ string) fault {
					if verb == "update" && !lost {
						lost = true
						return loseAns
					}
					return pass
				})
			}
			// And their watches lag for 30 s more, as an informer that backs
			// off does.
			a.stale, b.stale = true, true
			s.rec.resetDark()
			took := s.until(tm.renew+2*time.Second, "every cluster on exactly one replica after the host answers", s.settled)
			s.run(30*time.Second - took)
			a.stale, b.stale = false, false
			s.run(10 * time.Second)
			t.Logf("figure: sim host outage %s: all clusters running again %s after the host answered; longest dark run after it %s; conflicts logged: a %d, b %d",
				tc.outage, took, s.rec.maxDark, a.lines.count("modified"), b.lines.count("modified"))
			s.rec.noDoubles(t)
			if !s.settled() {
				t.Errorf("not settled 30 s later: %v", s.rec.owners())
			}
			// A line when renewals start failing, one per 30 s while they
			// do, one when they work again.
			limit := 2 + int(tc.outage/summaryEvery)
			for _, r := range []*simReplica{a, b} {
				if n := r.lines.count("cannot renew") + r.lines.count("renewing this replica's Lease again"); n > limit {
					t.Errorf("%s logged %d lines about renewing over a %s outage, want at most %d", r.id, n, tc.outage, limit)
				}
			}
		})
	}
}

// TestSimDifferentTimings: replica a declares 30 s / 20 s, b 6 s / 3 s, and
// a's host connection hangs: b must wait a's declared 30 s, and a stops at
// its own 20 s, so the clusters never run on both.
func TestSimDifferentTimings(t *testing.T) {
	s := newSim(t, 6)
	a := s.add("a", timing{30 * time.Second, 20 * time.Second, 2 * time.Second}, Options{})
	b := s.add("b", timing{6 * time.Second, 3 * time.Second, time.Second}, Options{})
	s.until(60*time.Second, "balanced", s.balanced)
	if s.load()["a"] == 0 {
		t.Fatal("a runs nothing: the test would prove nothing")
	}
	a.leases.setFault(func(string, string) fault { return hang })
	cut := s.clock.Now()
	lastRenew := s.store.get(ReplicaLeaseName("fleet", "a")).Spec.RenewTime.Time
	var aStopped, bTook time.Duration
	s.until(60*time.Second, "b runs everything", func() bool {
		if aStopped == 0 && s.load()["a"] == 0 {
			aStopped = s.clock.Since(cut)
		}
		return s.settled() && s.load()["b"] == len(s.names)
	})
	bTook = s.clock.Since(cut)
	t.Logf("figure: sim different timings: a (30s/20s) hung: a stopped its clusters after %s, b (6s/3s) ran them all after %s", aStopped, bTook)
	if took := cut.Add(bTook).Sub(lastRenew); took < 30*time.Second {
		t.Errorf("b took a's clusters %s after a's last renewal, before a's declared 30 s", took)
	}
	s.rec.noDoubles(t)
	_ = b
}

// TestSimHostileClusterLease: a cluster's Lease names a holder that no
// replica is (restored from a backup, applied by a GitOps tool): it is
// taken only once it has stood for the duration it declares; and when
// such a copy is applied again and again over a Lease a replica holds, the
// replica keeps running the cluster: it starts once in all.
func TestSimHostileClusterLease(t *testing.T) {
	s := newSim(t, 1)
	name := s.names[0]
	hostile := func() *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name:        ClusterLeaseName("fleet", name),
				Labels:      map[string]string{GroupLabel: GroupKey("fleet"), RoleLabel: RoleCluster},
				Annotations: map[string]string{GroupAnnotation: "fleet", ClusterAnnotation: name, WriterAnnotation: "restored"},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To("ghost"),
				LeaseDurationSeconds: ptr.To(int32(15)),
				RenewTime:            &metav1.MicroTime{Time: simStart.Add(-time.Hour)},
			},
		}
	}
	s.store.put(hostile())
	a := s.add("a", defaultTiming, Options{})
	took := s.until(30*time.Second, "a runs the cluster", s.settled)
	if took < 15*time.Second {
		t.Errorf("a took a Lease held by another holder after %s, before its declared 15 s", took)
	}
	// Why it waited is said once per reason, not at every step.
	if n := a.lines.count("does not run yet"); n == 0 || n > 3 {
		t.Errorf("a said %d times why the cluster does not run yet while it waited 15 s, want 1 to 3", n)
	}
	// A GitOps tool applies the copy every 3 s for a minute; a lagging
	// view sees it too.
	for range 20 {
		s.store.put(hostile())
		s.run(3 * time.Second)
	}
	s.run(20 * time.Second)
	if n := s.rec.startsOf("a", name); n > 2 {
		t.Errorf("the cluster started %d times on a, want at most 2", n)
	}
	if !s.settled() {
		t.Errorf("the cluster does not run: %v", s.rec.owners())
	}
	t.Logf("figure: sim hostile cluster Lease: taken after %s (declared 15 s); starts over 20 re-applies: %d", took, s.rec.startsOf("a", name))
	s.rec.noDoubles(t)
}

// TestSimHostileLeaseNamingLiveReplica: a restored Lease names replica b
// while a runs the cluster; a claims it again, b never runs it, and it
// starts on a once.
func TestSimHostileLeaseNamingLiveReplica(t *testing.T) {
	s := newSim(t, 8)
	s.add("a", defaultTiming, Options{})
	b := s.add("b", defaultTiming, Options{})
	s.until(30*time.Second, "balanced", s.balanced)
	var name string
	for n, rs := range s.rec.owners() {
		if rs[0] == "a" {
			name = n
		}
	}
	if name == "" {
		t.Fatal("a runs nothing")
	}
	cur := s.store.get(ClusterLeaseName("fleet", name))
	cur.Spec.HolderIdentity = ptr.To("b")
	cur.Annotations[WriterAnnotation] = b.c.o.Writer // an old copy b wrote
	for range 5 {
		s.store.put(cur)
		s.run(5 * time.Second)
	}
	s.run(20 * time.Second)
	if n := s.rec.startsOf("a", name) + s.rec.startsOf("b", name); n > 2 {
		t.Errorf("%s started %d times, want at most 2", name, n)
	}
	if !s.settled() {
		t.Errorf("not settled: %v", s.rec.owners())
	}
	s.rec.noDoubles(t)
}

// TestSimLaggingView: after a host outage one replica's watch stays stale
// for 30 s (an informer backing off): it renews and keeps its clusters
// anyway, and nothing starts more than twice.
func TestSimLaggingView(t *testing.T) {
	s := newSim(t, 6)
	a, b := s.add("a", defaultTiming, Options{}), s.add("b", defaultTiming, Options{})
	s.until(30*time.Second, "balanced", s.balanced)
	s.rec.resetStarts()
	for _, r := range []*simReplica{a, b} {
		r.leases.setFault(func(string, string) fault { return refuse })
	}
	s.run(20 * time.Second)
	for _, r := range []*simReplica{a, b} {
		r.leases.setFault(nil)
	}
	a.stale = true
	s.rec.resetDark()
	s.until(6*time.Second, "every cluster runs again", s.settled)
	s.run(30 * time.Second)
	a.stale = false
	s.run(20 * time.Second)
	// Started again once after the outage stopped it.
	for _, n := range s.names {
		if k := s.rec.startsOf("a", n) + s.rec.startsOf("b", n); k > 1 {
			t.Errorf("%s started %d times", n, k)
		}
	}
	if a.lines.count("modified") > 0 {
		t.Errorf("a logged %d conflicts", a.lines.count("modified"))
	}
	s.rec.noDoubles(t)
}

// TestSimDuplicateIdentity: two processes with one identity. Both notice,
// say so (log, event, metric, readiness) and run nothing until one is
// gone; no cluster runs twice for longer than a lease duration.
func TestSimDuplicateIdentity(t *testing.T) {
	s := newSim(t, 6)
	s.add("a", defaultTiming, Options{})
	x1 := s.add("x", defaultTiming, Options{Writer: "x-first"})
	s.until(30*time.Second, "settled", s.settled)
	x2 := s.add("x", defaultTiming, Options{Writer: "x-second"})
	s.until(10*time.Second, "both x see the other", func() bool {
		return x1.c.Check(nil) != nil && x2.c.Check(nil) != nil
	})
	s.until(20*time.Second, "a runs everything", func() bool { return s.settled() && s.load()["a"] == len(s.names) })
	if s.rec.overlap > defaultTiming.lease {
		t.Errorf("clusters ran twice for %s, over a lease duration", s.rec.overlap)
	}
	for _, r := range []*simReplica{x1, x2} {
		if r.lines.count("duplicate replica identity") == 0 {
			t.Errorf("%s did not log the duplicate", r.c.o.Writer)
		}
	}
	// One goes away; the other runs clusters again a lease duration later.
	s.crash(x2)
	s.until(30*time.Second, "x is back with a share", func() bool { return x1.c.Check(nil) == nil && s.settled() && s.load()["x"] > 0 })
	s.rec.noDoubles(t)
}

// TestSimDistinctGroups: programs whose Groups differ past 40 characters,
// in case or in punctuation share a namespace and cluster names; each runs
// every cluster of its own.
func TestSimDistinctGroups(t *testing.T) {
	long := "a-rather-long-group-name-for-our-controller"
	for _, pair := range [][2]string{{long + "-eu", long + "-us"}, {"a.b", "a-b"}, {"Fleet", "fleet"}} {
		t.Run(pair[0]+" "+pair[1], func(t *testing.T) {
			s := newSim(t, 8)
			p := s.add("r1", defaultTiming, Options{Group: pair[0]})
			q := s.add("r1", defaultTiming, Options{Group: pair[1]}) // the same identity, too
			s.run(20 * time.Second)
			for _, r := range []*simReplica{p, q} {
				for _, n := range s.names {
					if s.rec.startsOf("r1", n) != 2 {
						t.Errorf("%s: %s started %d times on r1, want once per program", r.c.o.Group, n, s.rec.startsOf("r1", n))
					}
				}
				if r.c.Check(nil) != nil {
					t.Errorf("%s: %v", r.c.o.Group, r.c.Check(nil))
				}
			}
		})
	}
}

// TestSimCrashTakeover: a replica that dies loses its clusters to the
// others a lease duration after it was last heard from.
func TestSimCrashTakeover(t *testing.T) {
	s := newSim(t, 8)
	a := s.add("a", defaultTiming, Options{})
	s.add("b", defaultTiming, Options{})
	s.until(30*time.Second, "balanced", s.balanced)
	s.crash(a)
	took := s.until(defaultTiming.lease+3*time.Second, "b runs everything", func() bool { return s.settled() && s.load()["b"] == 8 })
	t.Logf("figure: sim crash: b ran a's clusters %s after a died (LeaseDuration %s)", took, defaultTiming.lease)
	if took < defaultTiming.lease-defaultTiming.retry {
		t.Errorf("b took a's clusters after %s, before a's lease duration", took)
	}
	s.rec.noDoubles(t)
}

// TestSimLostClusterWrites: every write of a's cluster Leases lands but its
// answer is lost. a reads what it wrote and runs exactly the clusters whose
// Leases name it; it hands over to b what b is to run; nothing runs twice
// or nowhere.
func TestSimLostClusterWrites(t *testing.T) {
	s := newSim(t, 8)
	a := s.add("a", defaultTiming, Options{})
	a.leases.setFault(func(verb, name string) fault {
		if (verb == "create" || verb == "update") && strings.Contains(name, "-c-") {
			return loseAns
		}
		return pass
	})
	s.until(30*time.Second, "a runs everything", func() bool { return s.settled() && s.load()["a"] == 8 })
	s.add("b", defaultTiming, Options{})
	s.until(30*time.Second, "b runs its share", func() bool { return s.settled() && s.load()["b"] > 0 })
	s.run(10 * time.Second)
	for n, rs := range s.rec.owners() {
		if holder := ptr.Deref(s.store.get(ClusterLeaseName("fleet", n)).Spec.HolderIdentity, ""); len(rs) != 1 || rs[0] != holder {
			t.Errorf("%s runs on %v, its Lease names %q", n, rs, holder)
		}
	}
	s.rec.noDoubles(t)
}

// TestSimForeignLeaseUnderAClustersName: a Lease that has a cluster's
// Lease name but whose annotation names another cluster is the cluster's
// Lease all the same (the name decides): held by a holder that is no
// replica, the cluster waits for the duration it declares, saying why
// once, then runs with the annotation repaired; once it leaves the fleet
// nothing of it is kept.
func TestSimForeignLeaseUnderAClustersName(t *testing.T) {
	s := newSim(t, 1)
	name := s.names[0]
	s.store.put(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        ClusterLeaseName("fleet", name),
			Labels:      map[string]string{GroupLabel: GroupKey("fleet"), RoleLabel: RoleCluster},
			Annotations: map[string]string{GroupAnnotation: "fleet", ClusterAnnotation: "another", WriterAnnotation: "elsewhere"},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("ghost"), LeaseDurationSeconds: ptr.To(int32(15))},
	})
	a := s.add("a", defaultTiming, Options{})
	s.run(10 * time.Second) // within the foreign Lease's declared 15 s
	if n := s.rec.startsOf("a", name); n != 0 {
		t.Errorf("the cluster started %d times under a claim that has not expired", n)
	}
	if n := a.lines.count("held by ghost, whose claim has not expired"); n != 1 {
		t.Errorf("the reason the cluster waits was said %d times, want once", n)
	}
	s.until(10*time.Second, "a runs the cluster", func() bool { return s.load()["a"] == 1 })
	if got := s.store.get(ClusterLeaseName("fleet", name)).Annotations[ClusterAnnotation]; got != name {
		t.Errorf("the Lease's cluster annotation is %q after a took it, want %q", got, name)
	}
	s.names = nil // the cluster leaves the fleet
	s.run(2 * time.Second)
	if _, kept := a.c.claims[name]; kept {
		t.Errorf("a claim on %s is kept after it left the fleet: %+v %+v", name, *a.c.claims[name], s.store.get(ClusterLeaseName("fleet", name)))
	}
}
