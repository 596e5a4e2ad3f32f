package server_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// The start gate under faults: members whose API servers hang or refuse
// are started through a gate of a few slots, next to a healthy member, and
// the tests check Options.MaxConcurrentStarts's promise from outside (the
// members' Status) and from the gate's own counters (server.StartSlots).

const (
	// faultLimit is the gate's size in these tests, and hungStarts how
	// many hung members compete for it: more than there are slots.
	faultLimit = 2
	hungStarts = 4
	// faultHold is the slots' hold where a test lets it expire: short, so
	// that a wait of one hold is told apart from a wait on a hung API
	// server's timeouts (10s for the TLS handshake of a check,
	// CacheSyncTimeout for lists).
	faultHold = 300 * time.Millisecond
	// slotSlack is what a start may wait for its slot on top of the holds
	// it has to sit out: goroutines scheduled late on a loaded machine.
	slotSlack = 2 * time.Second
	// deleteBound is how long a Delete of a hung member may take.
	deleteBound = 5 * time.Second
)

// gatedStarts makes a gate of faultLimit slots, and keeps every start
// that fails from being retried while a test looks (the retry would take
// a slot again), and the probe's own timeout longer than a test: a hung
// check ends only by its TLS handshake's timeout, or its member's end.
func gatedStarts(limit int) server.Option {
	return func(o *server.Options) {
		o.MaxConcurrentStarts = limit
		o.ProbeTimeout = time.Minute
		o.CacheSyncTimeout = 2 * time.Minute
		o.Backoff.Duration = time.Minute
	}
}

// slotWatch samples a Server's start gate until end: the most slots it
// saw held at once.
type slotWatch struct {
	most atomic.Int64
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

func watchSlots(t *testing.T, srv *server.Server) *slotWatch {
	w := &slotWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(200 * time.Microsecond)
		defer tick.Stop()
		for {
			held, _ := server.StartSlots(srv)
			if int64(held) > w.most.Load() {
				w.most.Store(int64(held))
			}
			select {
			case <-tick.C:
			case <-w.stop:
				return
			}
		}
	}()
	t.Cleanup(func() { w.end() })
	return w
}

// end stops sampling and returns the most slots seen held.
func (w *slotWatch) end() int {
	w.once.Do(func() { close(w.stop) })
	<-w.done
	return int(w.most.Load())
}

// expectSlots fails t unless the gate holds held slots with waiting
// starts waiting.
func expectSlots(t *testing.T, srv *server.Server, held, waiting int, when string) {
	t.Helper()
	if h, w := server.StartSlots(srv); h != held || w != waiting {
		t.Fatalf("%s: the gate holds %d slots with %d starts waiting, want %d and %d", when, h, w, held, waiting)
	}
}

// eventuallySlots waits until the gate holds held slots with waiting
// starts waiting.
func eventuallySlots(t *testing.T, srv *server.Server, within time.Duration, held, waiting int, when string) {
	t.Helper()
	test.Eventually(t, within, fmt.Sprintf("%s: %d slots held, %d starts waiting", when, held, waiting), func() bool {
		h, w := server.StartSlots(srv)
		return h == held && w == waiting
	})
}

// frozenProxies starts n fault proxies in front of the fleet's members
// other than m1, each frozen when freeze is set.
func frozenProxies(t *testing.T, n int, freeze bool) []*test.FaultProxy {
	t.Helper()
	proxies := make([]*test.FaultProxy, n)
	for i := range proxies {
		proxies[i] = test.NewFaultProxy(t, fleet.Cluster(members[1+i%(len(members)-1)]).Config)
		if freeze {
			if err := proxies[i].Freeze(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return proxies
}

// addBehind adds one member per proxy, named prefix-<i>, and returns the
// names.
func addBehind(t *testing.T, srv *server.Server, prefix string, proxies []*test.FaultProxy) []string {
	t.Helper()
	names := make([]string, len(proxies))
	for i, p := range proxies {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
		if err := srv.Add(config.NewNamedConfig(names[i], p.Config())); err != nil {
			t.Fatal(err)
		}
	}
	return names
}

// waitPhaseIn waits until every named member is in one of phases.
func waitPhaseIn(t *testing.T, srv *server.Server, within time.Duration, names []string, phases ...server.Phase) {
	t.Helper()
	for _, name := range names {
		test.Eventually(t, within, fmt.Sprintf("%s in %v", name, phases), func() bool {
			st, err := srv.Status(name)
			return err == nil && slices.Contains(phases, st.Phase)
		})
	}
}

// expectHung fails t unless every named member is still in one of phases
// without a failure: its start goes on (or waits its turn), hung on its
// API server.
func expectHung(t *testing.T, srv *server.Server, names []string, when string, phases ...server.Phase) {
	t.Helper()
	for _, name := range names {
		st, err := srv.Status(name)
		if err != nil || !slices.Contains(phases, st.Phase) || st.Failures != 0 {
			t.Fatalf("%s: %s is %s after %d failures (%v, last error %v); want %v, its start still hung", when, name, st.Phase, st.Failures, err, st.LastError, phases)
		}
	}
}

// slotWait returns how long a Ready member waited for its start slot
// since it was added: its start began TimeToReady before it became Ready.
func slotWait(t *testing.T, srv *server.Server, name string, added time.Time) time.Duration {
	t.Helper()
	st, err := srv.Status(name)
	if err != nil || st.Phase != server.PhaseReady {
		t.Fatalf("%s: %s, %v; want Ready", name, st.Phase, err)
	}
	return st.Since.Add(-st.TimeToReady).Sub(added)
}

// deletePromptly deletes each named member, each within deleteBound.
func deletePromptly(t *testing.T, srv *server.Server, names []string, what string) {
	t.Helper()
	for _, name := range names {
		begin := time.Now()
		if err := srv.Delete(name); err != nil {
			t.Fatalf("deleting %s: %v", name, err)
		}
		took := time.Since(begin)
		t.Logf("Delete of %s (%s) took %s", name, what, took.Round(time.Millisecond))
		if took > deleteBound {
			t.Errorf("Delete of %s (%s) took %s, want at most %s", name, what, took, deleteBound)
		}
	}
}

// runningGoroutines is a leak check's baseline taken once srv runs and its
// goroutines have settled, before any member is added: what members leave
// behind after their Delete, with the Server still running, is found
// against it.
func runningGoroutines() goleak.Option {
	settledGoroutines()
	return goleak.IgnoreCurrent()
}

// deleteAllAndVerify deletes the members still there, closes the proxies
// and checks that no goroutine of any member is left while the Server
// runs on.
func deleteAllAndVerify(t *testing.T, srv *server.Server, running goleak.Option, proxies []*test.FaultProxy, names ...string) {
	t.Helper()
	for _, name := range names {
		if err := srv.Delete(name); err != nil {
			t.Fatalf("deleting %s: %v", name, err)
		}
	}
	for _, p := range proxies {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	}
	fleet.CloseConnections()
	leakcheck.VerifyNone(t, running)
}

// healthyBehindHung adds the healthy member m1 to a gate whose slots the
// named hung members hold or wait for, and checks that m1 waits for a slot
// at most about hold (the one the hung starts' slots are given back
// after), not for the hung starts: it is past the gate within hold plus
// slack, Ready soon after, and its start began within hold plus slack of
// its Add.
func healthyBehindHung(t *testing.T, srv *server.Server, hung []string, hold time.Duration) {
	t.Helper()
	added := time.Now()
	if err := srv.Add(fleet.Cluster("m1").Named); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, hold+slotSlack+3*time.Second, "m1 past the gate while the hung starts run on", func() bool {
		st, err := srv.Status("m1")
		return err == nil && slices.Contains([]server.Phase{server.PhaseStarting, server.PhaseSyncing, server.PhaseReady}, st.Phase)
	})
	waitReady(t, srv, "m1")
	waited := slotWait(t, srv, "m1", added)
	t.Logf("m1 behind %d hung starts: waited %s for a start slot, Ready %s after its Add", len(hung), waited.Round(time.Millisecond), time.Since(added).Round(time.Millisecond))
	if waited > hold+slotSlack {
		t.Errorf("m1 waited %s for a start slot behind hung starts; want at most %s", waited, hold+slotSlack)
	}
}

// TestHungServersDoNotHoldStartSlots: members whose API servers accept
// connections and answer nothing outnumber the start slots; each one's
// reachability check hangs in its TLS handshake. The slots' hold outlasts
// the test, so only the check's own hold (a check without an answer
// after 50 ms goes on without its slot) lets them go: each gives its slot
// back while its check goes on (Starting, no failure yet), so a healthy
// member added behind them gets a slot within moments and is Ready before
// any hung check has given up. The gate never holds more than its limit,
// and holds nothing once the hung starts are past their checks' holds.
// Each hung member is deleted promptly, and once all are deleted no
// goroutine of theirs is left, nor of anything once the Server stops.
func TestHungServersDoNotHoldStartSlots(t *testing.T) {
	ns := testNamespace(t)
	server.SetStartSlotHold(t, time.Hour)
	server.SetStartGateCPUBusy(t, cpuToSpare) // a slow check is the network's
	ignore := goleak.IgnoreCurrent()
	r := startServer(t, ns, nil, gatedStarts(faultLimit))
	running := runningGoroutines()
	slots := watchSlots(t, r.srv)
	proxies := frozenProxies(t, hungStarts, true)
	hung := addBehind(t, r.srv, "hung-check", proxies)
	waitPhaseIn(t, r.srv, 10*time.Second, hung, server.PhaseQueued, server.PhaseStarting)

	healthyBehindHung(t, r.srv, hung, 0)
	// m1 got there before any hung check's own timeout. A hung start may
	// still wait for its slot: m1, the newest, took the first one freed,
	// and the slot of a hung start that took its own later than the
	// others may not be back yet.
	expectHung(t, r.srv, hung, "once m1 is Ready", server.PhaseQueued, server.PhaseStarting)
	// Every hung start is past its check's hold: none holds a slot, none
	// waits, and each still runs.
	eventuallySlots(t, r.srv, slotSlack, 0, 0, "hung checks past their holds")
	expectHung(t, r.srv, hung, "with no slot held", server.PhaseStarting)
	if most := slots.end(); most > faultLimit {
		t.Errorf("%d start slots held at once; the limit is %d", most, faultLimit)
	}

	deletePromptly(t, r.srv, hung, "its check hung")
	deleteAllAndVerify(t, r.srv, running, proxies, "m1")
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	fleet.CloseConnections()
	leakcheck.VerifyNone(t, ignore)
}

// TestHungServersMidListDoNotHoldStartSlots: members whose API servers
// answer the reachability check and then hang (every byte held from the
// member's reconciler setups on, so the initial lists never return)
// outnumber the start slots. They reach Syncing and stay there, their
// lists hanging until CacheSyncTimeout, far beyond the test. Their checks
// answered, so what lets their slots go is the slot's own hold: each gives
// its slot back after it, and a healthy member added behind them waits
// about one hold and is Ready. The gate never holds more than its limit
// and holds nothing once they are all past their holds; each hung member
// is deleted promptly, and once all are deleted no goroutine of theirs is
// left, nor of anything once the Server stops.
func TestHungServersMidListDoNotHoldStartSlots(t *testing.T) {
	ns := testNamespace(t)
	server.SetStartSlotHold(t, faultHold)
	server.SetStartGateCPUBusy(t, cpuToSpare) // a slow check is the network's
	ignore := goleak.IgnoreCurrent()
	r := startServer(t, ns, nil, gatedStarts(faultLimit))
	running := runningGoroutines()
	slots := watchSlots(t, r.srv)
	proxies := frozenProxies(t, hungStarts, false)
	freezeAt := make(map[string]*test.FaultProxy, len(proxies))
	for _, p := range proxies {
		freezeAt[p.Config().Host] = p
	}
	// After the check, before the Manager starts its caches: the proxy in
	// front of a hung member holds every byte from here on.
	r.srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		if p := freezeAt[mgr.GetConfig().Host]; p != nil {
			return p.Freeze()
		}
		return nil
	})
	hung := addBehind(t, r.srv, "hung-list", proxies)
	waitPhaseIn(t, r.srv, 10*time.Second, hung, server.PhaseQueued, server.PhaseStarting, server.PhaseSyncing)

	healthyBehindHung(t, r.srv, hung, faultHold)
	// Every hung start gets past the gate (with slots held until synced
	// caches, the later ones would wait forever) and hangs in its lists.
	waitPhaseIn(t, r.srv, hungStarts/faultLimit*faultHold+slotSlack+10*time.Second, hung, server.PhaseSyncing)
	eventuallySlots(t, r.srv, faultHold+slotSlack, 0, 0, "hung lists past their holds")
	expectHung(t, r.srv, hung, "with no slot held", server.PhaseSyncing)
	if most := slots.end(); most > faultLimit {
		t.Errorf("%d start slots held at once; the limit is %d", most, faultLimit)
	}

	deletePromptly(t, r.srv, hung, "its lists hung")
	deleteAllAndVerify(t, r.srv, running, proxies, "m1")
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	fleet.CloseConnections()
	leakcheck.VerifyNone(t, ignore)
}

// TestHungServersRefusedFreeTheirSlotAtOnce: with one slot whose hold
// outlasts the test, only a start's end frees it. A member whose API
// server refuses connections fails its check at once and leaves the slot
// free. A member whose API server goes down later, while the start is in
// its reconciler setups (past its check, in the CPU-heavy part), fails
// there as the setup's request is refused, and the healthy member waiting
// behind it gets the slot within moments, not after the hold. A start
// that synced gives its slot back too.
func TestHungServersRefusedFreeTheirSlotAtOnce(t *testing.T) {
	ns := testNamespace(t)
	server.SetStartSlotHold(t, time.Hour)
	server.SetStartGateCPUBusy(t, cpuToSpare) // a slow check is the network's
	ignore := goleak.IgnoreCurrent()
	r := startServer(t, ns, nil, gatedStarts(1))
	running := runningGoroutines()
	slots := watchSlots(t, r.srv)
	proxies := frozenProxies(t, 2, false)
	down, mid := proxies[0], proxies[1]

	// Down from the start: the check is refused.
	down.Refuse()
	if err := r.srv.Add(config.NewNamedConfig("refused-down", down.Config())); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, r.srv, "refused-down", server.PhaseFailed)
	if st, _ := r.srv.Status("refused-down"); st.LastError == nil || !strings.Contains(st.LastError.Error(), "connection refused") {
		t.Errorf("refused-down failed with %v, want connection refused", st.LastError)
	}
	// The failed start gave its slot back as it ended.
	expectSlots(t, r.srv, 0, 0, "refused-down Failed")

	// Down during the setups: they wait for the test, then ask the API
	// server for a mapping outside the core group (as a controller of
	// Deployments does), which it refuses by then.
	midHost := mid.Config().Host
	inSetup, goOn := make(chan struct{}, 1), make(chan struct{})
	letGo := sync.OnceFunc(func() { close(goOn) })
	defer letGo()
	r.srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		if mgr.GetConfig().Host != midHost {
			return nil
		}
		select {
		case inSetup <- struct{}{}:
		default:
		}
		<-goOn
		_, err := mgr.GetRESTMapper().RESTMapping(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "v1")
		return err
	})
	if err := r.srv.Add(config.NewNamedConfig("refused-mid", mid.Config())); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inSetup:
	case <-time.After(30 * time.Second):
		t.Fatal("refused-mid did not reach its setups")
	}
	expectHung(t, r.srv, []string{"refused-mid"}, "in its setups", server.PhaseStarting)
	// The slot is refused-mid's for the hold, unless its check took longer
	// than the gate lets an unanswered check keep one.
	held, _ := server.StartSlots(r.srv)
	if err := r.srv.Add(fleet.Cluster("m1").Named); err != nil {
		t.Fatal(err)
	}
	if held == 1 {
		waitPhase(t, r.srv, "m1", server.PhaseQueued)
		expectSlots(t, r.srv, 1, 1, "m1 Queued behind refused-mid")
	} else {
		t.Logf("refused-mid's slot was given back before its setups (its check took long): m1 does not wait")
	}

	refused := time.Now()
	mid.Refuse()
	letGo()
	waitPhase(t, r.srv, "refused-mid", server.PhaseFailed)
	st, err := r.srv.Status("refused-mid")
	if err != nil || !errors.Is(st.LastError, server.ErrSetupFailed) || !strings.Contains(st.LastError.Error(), "connection refused") {
		t.Errorf("refused-mid: %v, last error %v; want its setup failed by the refusal", err, st.LastError)
	}
	test.Eventually(t, slotSlack+5*time.Second, "m1 Ready", func() bool {
		st, err := r.srv.Status("m1")
		return err == nil && st.Phase == server.PhaseReady
	})
	if held == 1 {
		waited := slotWait(t, r.srv, "m1", refused)
		t.Logf("m1 got the slot %s after refused-mid's API server refused", waited.Round(time.Millisecond))
		// A request on a connection the refusal reset is sent once more,
		// a second later (client-go retries a GET after a reset).
		if bound := time.Second + slotSlack; waited > bound {
			t.Errorf("m1 got the slot %s after refused-mid's API server refused; want within %s", waited, bound)
		}
	}
	// m1's caches synced: it holds no slot either.
	eventuallySlots(t, r.srv, slotSlack, 0, 0, "m1 Ready")
	if most := slots.end(); most > 1 {
		t.Errorf("%d start slots held at once; the limit is 1", most)
	}

	deletePromptly(t, r.srv, []string{"refused-down", "refused-mid"}, "Failed")
	deleteAllAndVerify(t, r.srv, running, proxies, "m1")
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	fleet.CloseConnections()
	leakcheck.VerifyNone(t, ignore)
}
