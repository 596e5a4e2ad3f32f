package server_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// TestReachDeleteInEveryProbePhaseLeavesNothing: a member is deleted while
// its Monitor waits between probes, while a probe hangs on an API server
// that answers nothing, while a probe waits for the fleet's only probe
// slot, and while it is Unreachable and probed every OutageProbeInterval.
// Each Delete returns promptly (the attempt waits for its Monitor, which
// finishes at once), no probe of a deleted member is sent after its Delete
// returned (no timer of it is left armed), and once the Server stops
// nothing of any member is left.
func TestReachDeleteInEveryProbePhaseLeavesNothing(t *testing.T) {
	ns := testNamespace(t)
	ignore := goleak.IgnoreCurrent()
	const interval = 100 * time.Millisecond
	srv, stop := reachServer(t, ns, false, true, func(o *server.Options) {
		o.ReachProbeInterval = interval
		o.OutageProbeInterval = interval
		o.ReachProbeTimeout = 30 * time.Second // a hung probe outlives the test's Deletes
		o.MaxConcurrentProbes = 1
	})
	type member struct {
		name   string
		proxy  *test.FaultProxy
		probes *inFlight
		after  int32 // probes sent when its Delete returned
	}
	add := func(name, on string) *member {
		p, err := test.StartFaultProxy(fleet.Cluster(on).Config)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		m := &member{name: name, proxy: p, probes: &inFlight{}}
		cfg := p.Config()
		cfg.Wrap(m.probes.wrap)
		if err := srv.Add(config.NewNamedConfig(name, cfg)); err != nil {
			t.Fatal(err)
		}
		return m
	}
	idle, hung, waiter, down, last := add("del-idle", "m1"), add("del-hung", "m2"), add("del-waiter", "m3"), add("del-down", "m4"), add("del-last", "m1")
	all := []*member{idle, hung, waiter, down, last}
	for _, m := range all {
		waitReady(t, srv, m.name)
	}
	del := func(m *member, phase string) {
		t.Helper()
		begin := time.Now()
		if err := srv.Delete(m.name); err != nil {
			t.Fatal(err)
		}
		m.after = m.probes.total.Load()
		took := time.Since(begin)
		t.Logf("deleted %s: Delete took %s", phase, took.Round(time.Millisecond))
		if took > 10*time.Second {
			t.Errorf("deleting a member %s took %s", phase, took)
		}
	}
	probed := func(m *member, n int32) {
		t.Helper()
		from := m.probes.total.Load()
		test.Eventually(t, 10*time.Second, fmt.Sprintf("%s probed %d times", m.name, n), func() bool { return m.probes.total.Load()-from >= n })
	}

	// Between probes: its timer is armed for the next.
	probed(idle, 2)
	test.Eventually(t, 10*time.Second, "del-idle between probes", func() bool { return idle.probes.now.Load() == 0 })
	del(idle, "between probes")

	// A probe hangs on an API server that answers nothing, holding the
	// fleet's only slot; the others' probes wait for it, one per member.
	// The Freeze may fall between an answer's headers and its body: that
	// probe hangs reading the body, and is still counted in flight.
	if err := hung.proxy.Freeze(); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 10*time.Second, "a probe of del-hung hanging", func() bool { return hung.probes.now.Load() == 1 })
	test.Eventually(t, 10*time.Second, "the three others' probes waiting for the slot", func() bool {
		buf := make([]byte, 8<<20)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "reach.(*Limiter).acquire") == 3
	})
	waited := waiter.probes.total.Load()
	del(waiter, "while its probe waits for a slot")
	if n := waiter.probes.total.Load(); n != waited {
		t.Errorf("del-waiter sent %d probes while it waited for a slot and was deleted, want none", n-waited)
	}
	del(hung, "while its probe hangs")

	// Unreachable: its API server refuses connections, and it is probed
	// every OutageProbeInterval.
	down.proxy.Refuse()
	waitPhase(t, srv, down.name, server.PhaseUnreachable)
	probed(down, 2)
	del(down, "while Unreachable")

	// The last, Ready all along, probes on once the slot is free.
	probed(last, 2)
	del(last, "after the others")

	// No timer of a deleted member is left: none probes again, for
	// several of its intervals.
	time.Sleep(5 * interval)
	for _, m := range all {
		if n := m.probes.total.Load(); n != m.after {
			t.Errorf("%s: %d probes sent after its Delete returned", m.name, n-m.after)
		}
	}
	if err := stop(); err != nil {
		t.Error(err)
	}
	for _, m := range all {
		if err := m.proxy.Close(); err != nil {
			t.Error(err)
		}
	}
	leakcheck.VerifyNone(t, ignore)
}
