package server_test

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// TestFarMembersDoNotWaitForEachOthersRoundTrips: members whose API
// servers are far away (200 ms added to every round trip, so that a
// reachability check takes several hundred milliseconds) start together
// even with a single start slot whose hold never expires: each gives the
// slot back once its check has gone 50 ms without an answer while the
// cores have time to spare. All of them
// reach their reconciler setups at once (each setup waits until all are in
// theirs: were the slot held through the check and the setups, only one
// ever would be), and each is Ready after that. A near member, whose check
// answers at once, keeps its slot: the next waits Queued meanwhile.
func TestFarMembersDoNotWaitForEachOthersRoundTrips(t *testing.T) {
	ns := testNamespace(t)
	server.SetStartSlotHold(t, time.Hour)
	server.SetStartGateCPUBusy(t, cpuToSpare) // however loaded the machine running the test
	ignore := goleak.IgnoreCurrent()
	r := startServer(t, ns, nil, func(o *server.Options) { o.MaxConcurrentStarts = 1 })

	const n = 4
	names := make([]string, n)
	hosts := make([]string, n) // the API server addresses the far members' Managers reach
	proxies := make([]*test.FaultProxy, 0, n)
	defer func() { // also on the way out of a failed test
		for _, p := range proxies {
			_ = p.Close()
		}
	}()
	for i := range names {
		p, err := test.StartFaultProxy(fleet.Cluster(members[i%len(members)]).Config)
		if err != nil {
			t.Fatal(err)
		}
		proxies = append(proxies, p)
		p.SetLatency(100 * time.Millisecond) // each way
		names[i], hosts[i] = fmt.Sprintf("far-%d", i), p.Config().Host
	}
	together := holdSetups(r.srv, hosts...)
	defer together.release()
	for i, p := range proxies {
		if err := r.srv.Add(config.NewNamedConfig(names[i], p.Config())); err != nil {
			t.Fatal(err)
		}
	}
	test.Eventually(t, 60*time.Second, "every far member in its setups at once, with one start slot", func() bool {
		return together.entered.Load() >= n
	})
	together.release()
	waitReady(t, r.srv, names...)

	// A near member answers its check at once and keeps the slot while
	// its setups run: the next member waits for it.
	near := holdSetups(r.srv, fleet.Cluster("m1").Config.Host) // near-0's; near-1 is on m2
	defer near.release()
	if err := r.srv.Add(config.NewNamedConfig("near-0", fleet.Cluster("m1").Config)); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 30*time.Second, "near-0 in its setups", func() bool { return near.entered.Load() == 1 })
	if err := r.srv.Add(config.NewNamedConfig("near-1", fleet.Cluster("m2").Config)); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 30*time.Second, "near-1 Queued behind near-0's slot", func() bool {
		st, err := r.srv.Status("near-1")
		return err == nil && st.Phase == server.PhaseQueued
	})
	near.release()
	waitReady(t, r.srv, "near-0", "near-1")

	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	}
	proxies = nil
	fleet.CloseConnections()
	leakcheck.VerifyNone(t, ignore)
}

// cpuToSpare is the start gate's view of the cores in tests of slow
// checks: goroutines never wait for a CPU.
func cpuToSpare() bool { return false }

// TestFarMemberKeepsItsSlotWhileTheCPUIsBusy: while goroutines wait for a
// CPU, a slow check is slow for want of one, and a far member's start
// keeps its slot through it and, once it answers, through its setups: the
// next member waits Queued meanwhile, and starts once the slot frees.
func TestFarMemberKeepsItsSlotWhileTheCPUIsBusy(t *testing.T) {
	ns := testNamespace(t)
	server.SetStartSlotHold(t, time.Hour)
	server.SetStartGateCPUBusy(t, func() bool { return true })
	ignore := goleak.IgnoreCurrent()
	r := startServer(t, ns, nil, func(o *server.Options) { o.MaxConcurrentStarts = 1 })

	p, err := test.StartFaultProxy(fleet.Cluster("m1").Config)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	p.SetLatency(100 * time.Millisecond) // each way
	far := holdSetups(r.srv, p.Config().Host)
	defer far.release()
	if err := r.srv.Add(config.NewNamedConfig("far-busy", p.Config())); err != nil {
		t.Fatal(err)
	}
	// far-busy takes the one slot before near-behind is added: a freed
	// slot goes to the newest waiting start, so two Adds whose starts
	// reach the gate in either order would test that, not the hold.
	test.Eventually(t, 30*time.Second, "far-busy holding the one slot", func() bool {
		held, _ := server.StartSlots(r.srv)
		return held == 1
	})
	if err := r.srv.Add(config.NewNamedConfig("near-behind", fleet.Cluster("m2").Config)); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 30*time.Second, "far-busy in its setups", func() bool { return far.entered.Load() == 1 })
	if st, err := r.srv.Status("near-behind"); err != nil || st.Phase != server.PhaseQueued {
		t.Fatalf("near-behind is %s (%v) while far-busy, whose slow check the busy CPU explains, holds the one slot; want Queued", st.Phase, err)
	}
	if held, waiting := server.StartSlots(r.srv); held != 1 || waiting != 1 {
		t.Fatalf("gate holds %d slots with %d waiting, want 1 and 1", held, waiting)
	}
	far.release()
	waitReady(t, r.srv, "far-busy", "near-behind")

	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Error(err)
	}
	fleet.CloseConnections()
	leakcheck.VerifyNone(t, ignore)
}
