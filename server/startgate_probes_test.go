package server_test

import (
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// probeGaps waits for n more probes of name (its Status' LastProbe
// changing) and returns the time between each and the one before.
func probeGaps(t *testing.T, srv *server.Server, name string, n int) []time.Duration {
	t.Helper()
	st, err := srv.Status(name)
	if err != nil {
		t.Fatal(err)
	}
	last := st.LastProbe
	var gaps []time.Duration
	test.Eventually(t, 60*time.Second, "probes of "+name, func() bool {
		st, err := srv.Status(name)
		if err == nil && !st.LastProbe.Equal(last) {
			if !last.IsZero() {
				gaps = append(gaps, st.LastProbe.Sub(last))
			}
			last = st.LastProbe
		}
		return len(gaps) >= n
	})
	return gaps
}

// TestProbesWaitWhileStartsWait, on real API servers: while a start waits
// for a slot, a Ready member that answers is probed every fourth
// ReachProbeInterval only, and its API server going silent (frozen by a
// fault proxy: no answer, no error) is still found within four intervals
// plus ReachProbeTimeout; once no start waits, every interval again.
func TestProbesWaitWhileStartsWait(t *testing.T) {
	ns := testNamespace(t)
	server.SetStartSlotHold(t, time.Hour)
	server.SetStartGateCPUBusy(t, func() bool { return true })
	ignore := goleak.IgnoreCurrent()
	const interval, timeout = 150 * time.Millisecond, 300 * time.Millisecond
	r := startServer(t, ns, nil, func(o *server.Options) {
		o.MaxConcurrentStarts = 1
		o.ReachProbeInterval = interval
		o.ReachProbeTimeout = timeout
	})
	p, err := test.StartFaultProxy(fleet.Cluster("m1").Config)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	holding := holdSetups(r.srv, fleet.Cluster("m2").Config.Host)
	defer holding.release()

	if err := r.srv.Add(config.NewNamedConfig("steady", p.Config())); err != nil {
		t.Fatal(err)
	}
	waitReady(t, r.srv, "steady")
	if gaps := probeGaps(t, r.srv, "steady", 3); slices.Min(gaps) >= 3*interval {
		t.Fatalf("probes %v apart with no start waiting, want every %s", gaps, interval)
	}

	// holder takes the one slot and keeps it (its setups wait, and the
	// CPU is said to be busy); waiter waits for it.
	if err := r.srv.Add(config.NewNamedConfig("holder", fleet.Cluster("m2").Config)); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 30*time.Second, "holder in its setups", func() bool { return holding.entered.Load() == 1 })
	if err := r.srv.Add(config.NewNamedConfig("waiter", fleet.Cluster("m3").Config)); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 30*time.Second, "waiter waiting for the slot", func() bool {
		held, waiting := server.StartSlots(r.srv)
		return held == 1 && waiting == 1
	})
	probeGaps(t, r.srv, "steady", 1) // the first whole gap begins after this probe
	for _, gap := range probeGaps(t, r.srv, "steady", 3) {
		if gap < 4*interval-interval/2 {
			t.Errorf("steady probed %s after its last probe while a start waits, want every fourth interval (%s)", gap, 4*interval)
		}
	}
	if st, _ := r.srv.Status("steady"); st.Phase != server.PhaseReady || !st.Reachable {
		t.Errorf("steady is %s, reachable %v, while its probes wait", st.Phase, st.Reachable)
	}

	// Silent: left out no more than three times, a probe finds it.
	if err := p.Freeze(); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	test.Eventually(t, 30*time.Second, "steady Unreachable", func() bool {
		st, err := r.srv.Status("steady")
		return err == nil && st.Phase == server.PhaseUnreachable
	})
	if took, bound := time.Since(frozen), 4*interval+timeout; took > bound+2*time.Second {
		t.Errorf("steady, silent while a start waits, Unreachable after %s, want within %s", took, bound)
	}
	if err := p.Pass(); err != nil {
		t.Fatal(err)
	}

	holding.release()
	waitReady(t, r.srv, "holder", "waiter", "steady")
	if _, waiting := server.StartSlots(r.srv); waiting != 0 {
		t.Fatalf("%d starts wait with every member Ready", waiting)
	}
	probeGaps(t, r.srv, "steady", 1)
	if gaps := probeGaps(t, r.srv, "steady", 4); slices.Min(gaps) >= 3*interval {
		t.Errorf("probes %v apart once no start waits, want every %s again", gaps, interval)
	}

	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Error(err)
	}
	fleet.CloseConnections()
	leakcheck.VerifyNone(t, ignore)
}
