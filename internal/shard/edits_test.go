package shard

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
)

// clusterOn returns a cluster that replica id alone runs.
func clusterOn(s *sim, id string) string {
	for n, rs := range s.rec.owners() {
		if len(rs) == 1 && rs[0] == id {
			return n
		}
	}
	return ""
}

// TestReplicaLeaseHolderEditedRunsNoClusterTwice: a human blanks (or rewrites) the
// holderIdentity of a live replica's own Lease. The replica renews and
// repairs it within a retry period; the other replica must not take its
// clusters meanwhile. off shifts the edit within a's renewal period.
func TestReplicaLeaseHolderEditedRunsNoClusterTwice(t *testing.T) {
	for _, holder := range []string{"", "someone-else", "b"} {
		for off := range 4 {
			t.Run(fmt.Sprintf("holder=%q/off=%d", holder, off), func(t *testing.T) {
				editLiveReplicaLease(t, defaultTiming, []string{"a", "b"}, off, func(l *coordinationv1.Lease) {
					l.Spec.HolderIdentity = ptr.To(holder)
				})
			})
		}
	}
}

// TestWriterAnnotationEditedAwayIsNoDuplicate: a human or a tool's apply drops the
// mccr.dev/shard-writer annotation of a live replica's Lease (no second
// process exists).
func TestWriterAnnotationEditedAwayIsNoDuplicate(t *testing.T) {
	s := newSim(t, 8)
	s.quiet = true
	a := s.add("a", defaultTiming, Options{})
	s.add("b", defaultTiming, Options{})
	s.until(30*time.Second, "balanced", s.balanced)
	s.rec.resetStarts()
	cur := s.store.get(ReplicaLeaseName("fleet", "a"))
	delete(cur.Annotations, WriterAnnotation)
	s.store.put(cur)
	s.run(30 * time.Second)
	starts := 0
	for _, n := range s.names {
		starts += s.rec.startsOf("a", n) + s.rec.startsOf("b", n)
	}
	t.Logf("duplicate lines on a: %d; starts after the edit: %d", a.lines.count("duplicate replica identity"), starts)
	if a.lines.count("duplicate replica identity") > 0 {
		t.Errorf("one edit of a's Lease annotations is reported as a duplicate identity, and a stopped its clusters (%d starts)", starts)
	}
}

// TestReplicaLeaseDurationEditedRunsNoClusterTwice: a human (or GitOps) sets a live
// replica's leaseDurationSeconds to 1 on its own Lease; the replica renews
// every retry period (2 s, the default).
func TestReplicaLeaseDurationEditedRunsNoClusterTwice(t *testing.T) {
	tm := timing{8 * time.Second, 4 * time.Second, 2 * time.Second}
	for off := range 8 {
		d := []int32{1, 0, -5}[off%3]
		t.Run(fmt.Sprintf("duration=%d/off=%d", d, off), func(t *testing.T) {
			editLiveReplicaLease(t, tm, []string{"a", "b"}, off, func(l *coordinationv1.Lease) {
				l.Spec.LeaseDurationSeconds = ptr.To(d)
			})
		})
	}
}

// TestClusterLeaseStrippedOfLabelsRunsAgain: someone strips the labels of a
// cluster's Lease (kubectl label lease X mccr.dev/shard-role-), or a tool
// re-applies it without them. The cluster must still run somewhere once
// its holder is gone.
func TestClusterLeaseStrippedOfLabelsRunsAgain(t *testing.T) {
	for _, stripAnnotations := range []bool{false, true} {
		t.Run(fmt.Sprintf("annotations-too=%v", stripAnnotations), func(t *testing.T) {
			s := newSim(t, 1)
			s.quiet = true
			a := s.add("a", defaultTiming, Options{})
			s.until(30*time.Second, "a runs it", s.settled)
			name := s.names[0]
			cur := s.store.get(ClusterLeaseName("fleet", name))
			cur.Labels = nil
			if stripAnnotations {
				cur.Annotations = nil
			}
			s.store.put(cur)
			s.run(5 * time.Second)
			if !s.settled() {
				t.Errorf("%s stopped running on a, its holder, once its Lease lost its labels: %v", name, s.rec.owners())
			}
			s.crash(a)
			b := s.add("b", defaultTiming, Options{})
			s.run(60 * time.Second)
			if !s.settled() {
				t.Errorf("%s runs nowhere 60 s after its holder died", name)
			}
			if n := b.leases.count("create"); n > 3 {
				t.Errorf("b tried to create the Lease %d times", n)
			}
			s.rec.noDoubles(t)
		})
	}
}

// TestFlakyHostLogsQuietly: the host answers every other renewal (an
// overloaded API server throttling, a flaky load balancer) for 5 minutes.
func TestFlakyHostLogsQuietly(t *testing.T) {
	s := newSim(t, 4)
	s.quiet = true
	tm := timing{8 * time.Second, 4 * time.Second, 2 * time.Second}
	a := s.add("a", tm, Options{})
	s.add("b", tm, Options{})
	s.until(30*time.Second, "balanced", s.balanced)
	n := 0
	a.leases.setFault(func(verb, name string) fault {
		if verb == "update" && strings.Contains(name, "-r-") {
			n++
			if n%2 == 0 {
				return refuse
			}
		}
		return pass
	})
	before := a.lines.count("cannot renew") + a.lines.count("renewing this replica's Lease again")
	s.run(5 * time.Minute)
	got := a.lines.count("cannot renew") + a.lines.count("renewing this replica's Lease again") - before
	if limit := 2 + int(5*time.Minute/summaryEvery); got > limit {
		t.Errorf("a logged %d lines about renewing over 5 minutes of a flaky host, want at most %d", got, limit)
	}
	s.rec.noDoubles(t)
}

// fleetMembers is a replica's own fleet, recorded in the sim's ledger.
type fleetMembers struct {
	s     *sim
	id    string
	names []string
}

func (m *fleetMembers) Names() []Member {
	out := make([]Member, 0, len(m.names))
	for _, n := range m.names {
		out = append(out, Member{Name: n})
	}
	return out
}
func (m *fleetMembers) Own(name string)                       { m.s.rec.start(m.id, name) }
func (m *fleetMembers) Disown(name, _ string) <-chan struct{} { return m.s.rec.stop(m.id, name, 0) }
func (m *fleetMembers) StopAll() {
	for _, n := range m.names {
		m.s.rec.stop(m.id, n, 0)
	}
}

// TestPinsThatDifferDuringARolloutLeaveNoClusterDark: a rolling update adds a pin; the new
// replica b has it, the old replica a does not yet.
func TestPinsThatDifferDuringARolloutLeaveNoClusterDark(t *testing.T) {
	s := newSim(t, 8)
	s.quiet = true
	s.add("a", defaultTiming, Options{})
	s.add("b", defaultTiming, Options{})
	s.until(30*time.Second, "balanced", s.balanced)
	// b restarts with a pin of a cluster a runs to replica a... or the reverse:
	// pin a cluster the hash gives b to a, in b's options only.
	var name string
	for n, rs := range s.rec.owners() {
		if rs[0] == "b" {
			name = n
		}
	}
	b := s.reps[1]
	s.leave(b)
	s.add("b", defaultTiming, Options{Pins: map[string]string{name: "a"}})
	s.run(60 * time.Second)
	if !s.settled() {
		t.Errorf("not every cluster runs while a and b disagree on a pin: %v (pinned %s)", s.rec.owners(), name)
	}
}

// TestLoadFactorsThatDifferLeaveNoClusterDark: a rolling update changes
// LoadFactor; the new replica b bounds loads by 2, the old replica a by 1.
// Each assigned some clusters to the other, which gave them back: they ran
// nowhere for as long as the two disagreed. Once they agree, each bounds
// by its own.
func TestLoadFactorsThatDifferLeaveNoClusterDark(t *testing.T) {
	s := newSim(t, 8)
	s.quiet = true
	s.add("a", defaultTiming, Options{LoadFactor: 1})
	b := s.add("b", defaultTiming, Options{LoadFactor: 1})
	s.until(30*time.Second, "balanced", s.balanced)
	s.leave(b)
	b = s.add("b", defaultTiming, Options{LoadFactor: 2})
	s.run(30 * time.Second)
	s.rec.resetDark()
	s.run(30 * time.Second)
	if !s.settled() || s.rec.maxDark > 0 {
		t.Errorf("not every cluster runs while a and b differ on the load factor: %v (longest dark %s over 30 s)", s.rec.owners(), s.rec.maxDark)
	}
	s.leave(b)
	s.add("b", defaultTiming, Options{LoadFactor: 1})
	s.until(30*time.Second, "each runs at most ceil(1 × 8 / 2)", func() bool {
		l := s.load()
		return s.settled() && l["a"] == 4 && l["b"] == 4
	})
	s.rec.noDoubles(t)
}

// TestFleetViewsThatDifferKeepKnownClustersRunning: one replica's cluster source has seen a new
// cluster, the other's not yet (a source lagging, a Secret not yet
// synced). The clusters both know must keep running.
func TestFleetViewsThatDifferKeepKnownClustersRunning(t *testing.T) {
	for extra := range 6 {
		s := newSim(t, 0)
		s.quiet = true
		base := make([]string, 0, 12)
		for i := range 12 {
			base = append(base, fmt.Sprintf("fleet/c%02d", i))
		}
		a := s.add("a", defaultTiming, Options{})
		b := s.add("b", defaultTiming, Options{})
		c := s.add("c", defaultTiming, Options{})
		a.c.members = &fleetMembers{s: s, id: "a", names: base}
		b.c.members = &fleetMembers{s: s, id: "b", names: base}
		c.c.members = &fleetMembers{s: s, id: "c", names: base}
		s.names = base
		s.until(30*time.Second, "settled", s.settled)
		more := slices.Clone(base)
		for i := range extra + 1 {
			more = append(more, fmt.Sprintf("fleet/new%02d", i))
		}
		a.c.members = &fleetMembers{s: s, id: "a", names: more}
		s.run(30 * time.Second)
		owners := s.rec.owners()
		for _, n := range base {
			if len(owners[n]) != 1 {
				t.Errorf("extra %d: %s, known to all, runs on %v while a knows %d more", extra, n, owners[n], extra+1)
			}
		}
	}
}

// TestCollectWithAStaleViewSparesLiveClaims: replica c's view lags (its list keeps
// failing) while it renews, and its cluster source has not seen cluster X
// yet (or saw it leave first). c must not delete X's Lease while a, alive,
// runs X.
func TestCollectWithAStaleViewSparesLiveClaims(t *testing.T) {
	s := newSim(t, 6)
	s.quiet = true
	a := s.add("a", defaultTiming, Options{})
	s.add("b", defaultTiming, Options{})
	s.until(30*time.Second, "balanced", s.balanced)
	x := clusterOn(s, "a")
	rest := slices.DeleteFunc(slices.Clone(s.names), func(n string) bool { return n == x })
	c := s.add("c", defaultTiming, Options{})
	c.c.members = &fleetMembers{s: s, id: "c", names: rest}
	s.run(10 * time.Second)
	c.stale = true
	deleted := false
	for range 200 {
		s.step()
		// Deleted while a still runs x (a Lease released, and so unheld,
		// is c's to collect: x is not in its fleet).
		if s.store.get(ClusterLeaseName("fleet", x)) == nil && slices.Contains(s.rec.owners()[x], "a") {
			deleted = true
			break
		}
	}
	if deleted {
		t.Errorf("c deleted the Lease of %s while a (alive: %v) runs it", x, !a.down)
		d := s.add("d", defaultTiming, Options{})
		_ = d
		s.run(20 * time.Second)
		s.rec.noDoubles(t)
	}
}

// TestGhostReplicaLeaseKeptByGitOps: a Lease of replica "ghost" (no such
// process) restored from a backup, and kept by a GitOps tool that
// re-creates it whenever it is deleted (self-heal).
func TestGhostReplicaLeaseKeptByGitOps(t *testing.T) {
	s := newSim(t, 8)
	s.quiet = true
	s.add("a", defaultTiming, Options{})
	s.add("b", defaultTiming, Options{})
	s.until(30*time.Second, "balanced", s.balanced)
	ghost := s.store.get(ReplicaLeaseName("fleet", "a")).DeepCopy()
	ghost.Name = ReplicaLeaseName("fleet", "ghost")
	ghost.Spec.HolderIdentity = ptr.To("ghost")
	ghost.Annotations[WriterAnnotation] = "restored"
	ghost.ResourceVersion, ghost.UID = "", ""
	s.rec.resetDark()
	for range 240 { // 60 s
		if s.store.get(ghost.Name) == nil {
			s.store.put(ghost)
		}
		s.step()
	}
	t.Logf("longest dark run over 60 s: %s; owners %v", s.rec.maxDark, s.rec.owners())
	if !s.settled() {
		t.Errorf("clusters run nowhere while a ghost replica Lease is kept: %v", s.rec.owners())
	}
}

// TestReplicaLeaseEditedThenDeletedRunsNoClusterTwice: a's Lease duration
// is edited down to 1 s just as a loses the API server (it runs its
// clusters until its renew deadline), and then the Lease is deleted, by
// hand or by a replica that joined after the edit and never saw the longer
// record. The tombstone others keep holds a's claim until the longer
// record's end, not the edited one's.
func TestReplicaLeaseEditedThenDeletedRunsNoClusterTwice(t *testing.T) {
	for _, how := range []string{"hand-delete", "new-replica"} {
		t.Run(how, func(t *testing.T) {
			s := newSim(t, 8)
			s.quiet = true
			a := s.add("a", defaultTiming, Options{})
			s.add("b", defaultTiming, Options{})
			s.until(30*time.Second, "balanced", s.balanced)
			s.run(2 * defaultTiming.lease) // cluster Leases old
			a.leases.setFault(func(string, string) fault { return refuse })
			cur := s.store.get(ReplicaLeaseName("fleet", "a"))
			cur.Spec.LeaseDurationSeconds = ptr.To(int32(1))
			s.store.put(cur)
			s.step()
			switch how {
			case "hand-delete":
				s.store.mu.Lock()
				delete(s.store.items, ReplicaLeaseName("fleet", "a"))
				s.store.mu.Unlock()
			case "new-replica":
				s.add("c", defaultTiming, Options{})
			}
			s.run(20 * time.Second)
			s.rec.noDoubles(t)
		})
	}
}

// TestReplicaLeaseRoleLabelEditedRunsNoClusterTwice: one hand edit sets
// the role label of live replica a's Lease to "cluster": its name, not
// the label, says what it is, so b does not count a dead, and a does not
// collect its own Lease as a stray cluster's.
func TestReplicaLeaseRoleLabelEditedRunsNoClusterTwice(t *testing.T) {
	for off := range 4 {
		t.Run(fmt.Sprintf("off=%d", off), func(t *testing.T) {
			// b first: it steps before a renews and repairs the label.
			editLiveReplicaLease(t, defaultTiming, []string{"b", "a"}, off, func(l *coordinationv1.Lease) {
				l.Labels[RoleLabel] = RoleCluster
			})
		})
	}
}

// TestPinsFollowedOnlyWhenLiveReplicasAgree: a replica follows its Pins
// while every other live replica publishes the same, or none (a replica of
// an earlier release, which follows its own); not while one publishes
// others (or "none", having no Pins).
func TestPinsFollowedOnlyWhenLiveReplicasAgree(t *testing.T) {
	pins := map[string]string{"fleet/c01": "a"}
	o := &Options{Identity: "a", Group: "fleet", Pins: pins}
	o.defaults()
	c := &Coordinator{o: *o}
	snapOf := func(published string) map[string]entry {
		return map[string]entry{ReplicaLeaseName("fleet", "b"): {rec: record{holder: "b", pins: published}}}
	}
	for _, tc := range []struct {
		name, published string
		follow          bool
	}{
		{"same", PinsKey(pins), true},
		{"earlier release", "", true},
		{"other pins", PinsKey(map[string]string{"fleet/c01": "b"}), false},
		{"no pins", PinsKey(nil), false},
	} {
		if got := c.pins(snapOf(tc.published), []string{"a", "b"}) != nil; got != tc.follow {
			t.Errorf("%s: follows its pins %v, want %v", tc.name, got, tc.follow)
		}
	}
}

// TestLoadFactorFollowedOnlyWhenLiveReplicasAgree: a replica bounds loads by its
// own load factor while every other live replica declares the same, or
// none (a replica of an earlier release); else by the default.
func TestLoadFactorFollowedOnlyWhenLiveReplicasAgree(t *testing.T) {
	o := &Options{Identity: "a", Group: "fleet", LoadFactor: 1.5}
	o.defaults()
	c := &Coordinator{o: *o}
	for _, tc := range []struct {
		name, declared string
		want           float64
	}{
		{"same", "1.5", 1.5},
		{"earlier release", "", 1.5},
		{"another", "2", DefaultLoadFactor},
	} {
		snap := map[string]entry{ReplicaLeaseName("fleet", "b"): {rec: record{holder: "b", loadFactor: tc.declared}}}
		if got := c.loadFactor(snap, []string{"a", "b"}); got != tc.want {
			t.Errorf("%s: bounds loads by %v, want %v", tc.name, got, tc.want)
		}
	}
}

// editLiveReplicaLease runs replicas (in that order) until balanced and
// their cluster Leases are old, steps off times, applies edit to the Lease
// of live replica "a" as someone else would write it, and checks that no
// cluster runs on two replicas over the 30 s that follow.
func editLiveReplicaLease(t *testing.T, tm timing, replicas []string, off int, edit func(*coordinationv1.Lease)) {
	t.Helper()
	s := newSim(t, 8)
	s.quiet = true
	for _, id := range replicas {
		s.add(id, tm, Options{})
	}
	s.until(30*time.Second, "balanced", s.balanced)
	s.run(2 * tm.lease) // cluster Leases old
	for range off {
		s.step()
	}
	cur := s.store.get(ReplicaLeaseName("fleet", "a"))
	edit(cur)
	s.store.put(cur)
	s.run(30 * time.Second)
	s.rec.noDoubles(t)
}

// TestHandoverPastAReplicaWithoutTheCluster: replica c's cluster source
// does not have cluster x (it lags behind the others', or a rolling update
// changed it). a runs x; then a stops gracefully (its release of x's Lease
// is there for b to take), or dies (its claim is there for b to take once
// a's Lease expired). c, which sees x's Lease as one of a cluster that left
// its fleet, must not delete it under b: b, which saw it held and finds it
// gone, would wait out a's lease duration once more before it runs x.
// The replicas step in an order of their own each period.
func TestHandoverPastAReplicaWithoutTheCluster(t *testing.T) {
	for _, how := range []string{"leave", "crash"} {
		for seed := range 8 {
			t.Run(fmt.Sprintf("%s/%d", how, seed), func(t *testing.T) {
				s := newSim(t, 12)
				s.quiet = true
				s.shuffle = rand.New(rand.NewPCG(uint64(seed), 7)) //nolint:gosec // a test's order
				a := s.add("a", defaultTiming, Options{})
				s.add("b", defaultTiming, Options{})
				s.until(30*time.Second, "balanced", s.balanced)
				// A cluster of a's that is b's once a is gone.
				after := Assign(Input{Replicas: []string{"b", "c"}, Names: s.names})
				x := ""
				for _, n := range s.names {
					if o := s.rec.owners()[n]; len(o) == 1 && o[0] == "a" && after[n] == "b" {
						x = n
						break
					}
				}
				if x == "" {
					t.Fatalf("no cluster of a's goes to b: %v", s.rec.owners())
				}
				rest := slices.DeleteFunc(slices.Clone(s.names), func(n string) bool { return n == x })
				c := s.add("c", defaultTiming, Options{})
				c.c.members = &fleetMembers{s: s, id: "c", names: rest}
				s.run(time.Duration(seed) * 300 * time.Millisecond)
				s.until(30*time.Second, x+" runs on a", func() bool { return slices.Equal(s.rec.owners()[x], []string{"a"}) })
				var limit time.Duration
				switch how {
				case "leave":
					a.c.startLeaving()
					s.until(10*time.Second, x+" stops on a", func() bool { return len(s.rec.owners()[x]) == 0 })
					limit = 2 * time.Second
				case "crash":
					s.crash(a)
					limit = defaultTiming.lease + 2*time.Second
				}
				dark := s.until(3*defaultTiming.lease, x+" runs on b", func() bool { return slices.Equal(s.rec.owners()[x], []string{"b"}) })
				if dark > limit {
					t.Errorf("after a's %s, %s ran nowhere for %s, over %s: c deleted its Lease under b", how, x, dark, limit)
				}
				s.rec.noDoubles(t)
			})
		}
	}
}
