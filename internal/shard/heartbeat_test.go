package shard

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// newTestHeartbeat returns a heartbeat of replica id on s, with writer w.
func newTestHeartbeat(t *testing.T, s *store, clk *clocktesting.FakeClock, id, w string) (*heartbeat, *fakeLeases, *lineCounter) {
	lines := &lineCounter{}
	o := &Options{Identity: id, Namespace: s.ns, Group: "fleet", LeaseDuration: 8 * time.Second, RenewDeadline: 4 * time.Second,
		RetryPeriod: time.Second, Clock: clk, Writer: w, Logger: lines.logger(t, id+"/"+w)}
	o.defaults()
	f := &fakeLeases{s: s, clock: clk}
	return newHeartbeat(o, f, newCache(clk, "fleet", o.RenewDeadline, o.LeaseDuration, nil), o.Logger), f, lines
}

// TestHeartbeatLostAnswer: a renewal applied whose answer was lost makes
// the next one conflict; that one reads the Lease from the API server,
// recognises its own write, and renews: no duplicate, no second conflict.
func TestHeartbeatLostAnswer(t *testing.T) {
	s, clk := newStore("ns"), clocktesting.NewFakeClock(simStart)
	h, f, lines := newTestHeartbeat(t, s, clk, "a", "w1")
	ctx := context.Background()
	if !h.renew(ctx) {
		t.Fatal("first renewal failed")
	}
	f.setFault(func(verb, _ string) fault {
		if verb == "update" {
			return loseAns
		}
		return pass
	})
	clk.Step(time.Second)
	if h.renew(ctx) {
		t.Fatal("a renewal whose answer was lost reported success")
	}
	f.setFault(nil)
	gets := f.count("get")
	clk.Step(time.Second)
	if !h.renew(ctx) {
		t.Fatal("the renewal after a lost answer failed")
	}
	if got := f.count("get") - gets; got != 1 {
		t.Errorf("%d reads to resolve a lost answer, want 1", got)
	}
	if !h.healthy(clk.Now()) || !h.alone(clk.Now()) || h.duplicate {
		t.Errorf("healthy %v, alone %v, duplicate %v after a lost answer", h.healthy(clk.Now()), h.alone(clk.Now()), h.duplicate)
	}
	if n := lines.count("modified"); n > 0 {
		t.Errorf("%d conflict lines logged", n)
	}
}

// TestHeartbeatIgnoresCache: the cache holding a stale copy of the Lease
// (an informer that lags after an outage) does not keep the renewals
// failing.
func TestHeartbeatIgnoresCache(t *testing.T) {
	s, clk := newStore("ns"), clocktesting.NewFakeClock(simStart)
	h, _, _ := newTestHeartbeat(t, s, clk, "a", "w1")
	ctx := context.Background()
	h.renew(ctx)
	stale := s.get(h.name)
	for range 3 {
		clk.Step(time.Second)
		h.renew(ctx)
	}
	h.cache.relist([]coordinationv1.Lease{*stale}) // superseded: dropped
	if e, _ := h.cache.get(h.name); e.lease.ResourceVersion == stale.ResourceVersion {
		t.Error("the cache took back a superseded version from a lagging list")
	}
	h.last = nil // as after a conflict
	clk.Step(time.Second)
	if !h.renew(ctx) {
		t.Error("renewal failed")
	}
}

// TestHeartbeatDuplicateIdentity: two processes renewing one Lease see
// each other within a renewal or two and report it: an error line, a
// Warning event on the Lease, the metric, the readiness check.
func TestHeartbeatDuplicateIdentity(t *testing.T) {
	s, clk := newStore("ns"), clocktesting.NewFakeClock(simStart)
	ctx := context.Background()
	h1, _, l1 := newTestHeartbeat(t, s, clk, "x", "w1")
	rec := events.NewFakeRecorder(10)
	h1.o.Events = rec
	h1.renew(ctx)
	h2, _, _ := newTestHeartbeat(t, s, clk, "x", "w2")
	for range 3 {
		clk.Step(time.Second)
		h2.renew(ctx)
		h1.renew(ctx)
	}
	if !h1.duplicate || !h2.duplicate {
		t.Fatalf("duplicate seen: first %v, second %v", h1.duplicate, h2.duplicate)
	}
	if l1.count("duplicate replica identity") != 1 {
		t.Errorf("the first process logged the duplicate %d times, want once", l1.count("duplicate replica identity"))
	}
	select {
	case ev := <-rec.Events:
		if !strings.Contains(ev, "Warning DuplicateIdentity") {
			t.Errorf("event %q", ev)
		}
	default:
		t.Error("no event recorded")
	}
	if got := s.get(h1.name).Annotations[StandbyAnnotation]; got == "" {
		t.Error("the Lease does not say its replica is on standby")
	}
	// The second goes away; the first is alone a lease duration later.
	for range 7 {
		clk.Step(time.Second)
		h1.renew(ctx)
		h1.check(clk.Now())
	}
	if !h1.duplicate {
		t.Error("alone again before a lease duration passed")
	}
	for range 3 {
		clk.Step(time.Second)
		h1.renew(ctx)
		h1.check(clk.Now())
	}
	if h1.duplicate || h1.dupFlag.Load() {
		t.Error("still reports a duplicate a lease duration after the other left")
	}
	if got := s.get(h1.name).Annotations[StandbyAnnotation]; got != "" {
		t.Errorf("the Lease still says %q", got)
	}
}

// TestHeartbeatPredecessor: a Lease left by an earlier process of the same
// identity is not a duplicate, but the replica waits for its declared
// duration (that process may still run clusters) before running any.
func TestHeartbeatPredecessor(t *testing.T) {
	s, clk := newStore("ns"), clocktesting.NewFakeClock(simStart)
	ctx := context.Background()
	old, _, _ := newTestHeartbeat(t, s, clk, "x", "w-old")
	old.o.LeaseDuration = 20 * time.Second
	old.renew(ctx)
	clk.Step(5 * time.Second)
	h, _, lines := newTestHeartbeat(t, s, clk, "x", "w-new")
	h.renew(ctx)
	if h.duplicate || h.alone(clk.Now()) {
		t.Fatalf("duplicate %v, alone %v right after finding an earlier process's Lease", h.duplicate, h.alone(clk.Now()))
	}
	clk.Step(19 * time.Second)
	if h.alone(clk.Now()) {
		t.Error("alone before the earlier process's declared 20 s")
	}
	clk.Step(time.Second)
	if !h.alone(clk.Now()) || h.duplicate {
		t.Errorf("alone %v, duplicate %v after the declared 20 s", h.alone(clk.Now()), h.duplicate)
	}
	if lines.count("earlier run") != 1 {
		t.Errorf("%d lines about the earlier process", lines.count("earlier run"))
	}
}

// TestHeartbeatRecreatesDeletedLease: a Lease deleted by hand is created
// again at the next renewal.
func TestHeartbeatRecreatesDeletedLease(t *testing.T) {
	s, clk := newStore("ns"), clocktesting.NewFakeClock(simStart)
	ctx := context.Background()
	h, f, _ := newTestHeartbeat(t, s, clk, "a", "w1")
	h.renew(ctx)
	if err := f.Delete(ctx, h.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	if !h.renew(ctx) || s.get(h.name) == nil {
		t.Error("the Lease was not created again")
	}
}

// TestFailuresLogQuietly: five minutes of failures every second log a line
// when they start, one per 30 s while they last, and one when they end.
func TestFailuresLogQuietly(t *testing.T) {
	clk := clocktesting.NewFakeClock(simStart)
	lines := &lineCounter{}
	f := newFailures(lines.logger(t, "r"), clk, recoveredAfter, "cannot renew", "renewing again")
	for range 300 {
		f.failed(errors.New("connection refused"))
		clk.Step(time.Second)
	}
	for range 10 {
		f.ok()
		clk.Step(time.Second)
	}
	f.ok()
	// t=0, a summary at 30 s, 60 s, … 270 s, and the recovery once calls
	// have worked for 10 s.
	if n := len(lines.lines); n != 1+9+1 {
		t.Errorf("%d lines for a 5 min outage, want 11", n)
	}
	if lines.count("renewing again") != 1 || lines.count(`"failures"=300`) != 1 {
		t.Errorf("the recovery line does not count the failures: %v", lines.lines[len(lines.lines)-1])
	}
}

func TestCacheVersions(t *testing.T) {
	clk := clocktesting.NewFakeClock(simStart)
	c := newCache(clk, "fleet", 4*time.Second, 8*time.Second, nil)
	mk := func(rv, holder string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", ResourceVersion: rv, UID: "u"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
		setMeta(l, "fleet", RoleReplica, "w")
		return l
	}
	c.watched(mk("1", "a"))
	first, _ := c.get("l")
	clk.Step(time.Second)
	c.fresh(mk("2", "a"), clk.Now()) // same record, new version: since stays
	if e, _ := c.get("l"); !e.since.Equal(first.since) {
		t.Error("a version that changed nothing of the record moved since")
	}
	c.watched(mk("1", "a")) // a lagging watch
	if e, _ := c.get("l"); e.lease.ResourceVersion != "2" {
		t.Errorf("a superseded version came back: %s", e.lease.ResourceVersion)
	}
	clk.Step(time.Second)
	c.watched(mk("3", "b"))
	if e, _ := c.get("l"); !e.since.Equal(clk.Now()) {
		t.Error("a changed record did not move since")
	}
	c.missing("l")
	if e, ok := c.get("l"); !ok || !e.gone {
		t.Error("a deleted replica Lease left no tombstone")
	}
	c.prune(clk.Now().Add(time.Hour), 8*time.Second)
	if _, ok := c.get("l"); ok {
		t.Error("the tombstone outlived its claim")
	}
	other := mk("9", "z")
	other.Annotations[GroupAnnotation] = "Fleet"
	c.watched(other)
	if _, ok := c.get("l"); ok {
		t.Error("a Lease of another Group (same label value) entered the cache")
	}
}

func TestNames(t *testing.T) {
	long := "a-rather-long-group-name-for-our-controller"
	groups := []string{long + "-eu", long + "-us", "a.b", "a-b", "Fleet", "fleet", "fleet ", "...", "ünïcode", strings.Repeat("x", 300)}
	seen := map[string]string{}
	for _, g := range groups {
		k := GroupKey(g)
		if prev, ok := seen[k]; ok {
			t.Errorf("groups %q and %q share key %q", prev, g, k)
		}
		seen[k] = g
		if errs := validLabelValue(k); errs != nil {
			t.Errorf("GroupKey(%q) = %q: %v", g, k, errs)
		}
		for _, n := range []string{ReplicaLeaseName(g, "Pod_Name.1"), ClusterLeaseName(g, "ns/Cluster.A"), ClusterLeaseName(g, strings.Repeat("é", 200))} {
			if errs := validName(n); errs != nil {
				t.Errorf("Lease name %q: %v", n, errs)
			}
		}
	}
}

func validLabelValue(s string) []string { return validation.IsValidLabelValue(s) }
func validName(s string) []string       { return validation.IsDNS1123Subdomain(s) }

// TestFailuresTellAnOutageSoonAfterARecovery: renewals fail for 1 s, work
// for 11 s (the recovery line), then fail for 25 s: an outage long enough
// to fence the replica is told of once it has lasted a few seconds, and
// so is its end; a blip as soon after is not.
func TestFailuresTellAnOutageSoonAfterARecovery(t *testing.T) {
	clk := clocktesting.NewFakeClock(simStart)
	lines := &lineCounter{quiet: true}
	f := newFailures(lines.logger(t, "a"), clk, recoveredAfter, "cannot renew", "renewing again")
	tick := func(d time.Duration, fail bool) {
		for end := clk.Now().Add(d); clk.Now().Before(end); clk.Step(time.Second) {
			if fail {
				f.failed(errors.New("refused"))
			} else {
				f.ok()
			}
		}
	}
	tick(time.Second, true)
	tick(11*time.Second, false)
	tick(2*time.Second, true) // a blip
	tick(11*time.Second, false)
	if n := len(lines.lines); n != 2 {
		t.Errorf("%d lines for a failure, its recovery and a blip soon after, want 2: %q", n, lines.lines)
	}
	tick(25*time.Second, true)
	if lines.count("cannot renew") != 2 {
		t.Errorf("an outage that began soon after a recovery line is not told of: %q", lines.lines)
	}
	tick(11*time.Second, false)
	if lines.count("renewing again") != 2 {
		t.Errorf("its end is not told of: %q", lines.lines)
	}
}
