package reach

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/internal/leakcheck"
)

// Started Monitors waiting for their next probe hold no goroutine: a fleet
// of them costs the process none, however many, before and after they
// probed; they all finish when their contexts end.
func TestIdleMonitorsHoldNoGoroutine(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newAPIServer(t, 0)
	const monitors = 200
	cfg := s.config(t)
	base := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ms := make([]*Monitor, monitors)
	dones := make([]<-chan struct{}, monitors)
	for i := range ms {
		m, err := New(rest.CopyConfig(cfg), Options{Interval: time.Hour, OutageInterval: time.Millisecond, Timeout: 5 * time.Second}, newEvents())
		if err != nil {
			t.Fatal(err)
		}
		ms[i], dones[i] = m, start(ctx, m)
	}
	if n := runtime.NumGoroutine() - base; n > 5 {
		t.Errorf("%d Monitors waiting for their first probe hold %d goroutines, want none", monitors, n)
	}
	// Each probes once (a request got no answer), is answered, and waits
	// an Interval for the next: the probes' goroutines end with them.
	for _, m := range ms {
		m.WatchError(syscall.ECONNRESET)
	}
	eventually(t, "a probe of each Monitor", func() bool { return s.probes.Load() >= monitors })
	// What is left besides the Monitors: the connections the probes opened
	// (kept idle by the transport, closing the others).
	eventually(t, "the probes' goroutines gone", func() bool {
		return runtime.NumGoroutine()-base <= 10
	})
	cancel()
	for i, done := range dones {
		finished(t, 5*time.Second, fmt.Sprintf("(#%d) after its context ended", i), done)
	}
}

// A context that ends while a probe waits for its answer ends the probe:
// the Monitor finishes at once, and the probe cut short is no outcome to
// tell. One that ended before Start finishes the Monitor without a probe.
func TestContextEndsWhileProbing(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newAPIServer(t, 0)
	s.mode.Store(1)
	ev := newEvents()
	m, err := New(s.config(t), Options{Interval: time.Millisecond, OutageInterval: time.Millisecond, Timeout: time.Minute}, ev)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := start(ctx, m)
	eventually(t, "a probe in flight", func() bool { return s.inFlight.Load() == 1 })
	cancel()
	finished(t, 5*time.Second, "after its context ended during a probe", done)
	if n, u, _ := ev.count(); n != 0 || u != 0 {
		t.Errorf("told %d probes and %d outages of a probe cut short, want none", n, u)
	}

	m, err = New(s.config(t), Options{Interval: time.Millisecond, OutageInterval: time.Millisecond, Timeout: time.Minute}, ev)
	if err != nil {
		t.Fatal(err)
	}
	probes := s.probes.Load()
	finished(t, 5*time.Second, "started with a context that had ended", start(ctx, m))
	if m.running.Load() || s.probes.Load() != probes {
		t.Error("a Monitor started with a context that had ended probes")
	}
}

// A context that ends while a probe waits for a Limiter slot ends the
// wait: the Monitor finishes, having sent nothing, and holds no slot.
func TestContextEndsWhileWaitingForASlot(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newAPIServer(t, 0)
	lim := NewLimiter(1)
	if !lim.acquire(context.Background()) {
		t.Fatal("no slot")
	}
	ev := newEvents()
	m, err := New(s.config(t), Options{Interval: time.Millisecond, OutageInterval: time.Millisecond, Timeout: time.Minute, Limit: lim}, ev)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := start(ctx, m)
	eventually(t, "a probe waiting for a slot", func() bool {
		buf := make([]byte, 1<<20)
		return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "reach.(*Limiter).acquire")
	})
	cancel()
	finished(t, 5*time.Second, "after its context ended while it waited for a slot", done)
	lim.release()
	if !lim.acquire(context.Background()) {
		t.Fatal("the Monitor kept a slot")
	}
	lim.release()
	if n := s.probes.Load(); n != 0 {
		t.Errorf("%d probes sent, want 0", n)
	}
	if n, _, _ := ev.count(); n != 0 {
		t.Errorf("told %d probes, want 0", n)
	}
}

// A request without an answer while a probe runs brings the probe after
// it forward to OutageInterval, as one while the Monitor waits does.
func TestSuspectDuringAProbeBringsTheNextForward(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newAPIServer(t, 200*time.Millisecond)
	m, err := New(s.config(t), Options{Interval: time.Hour, OutageInterval: 20 * time.Millisecond, Timeout: 5 * time.Second}, newEvents())
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	m.WatchError(syscall.ECONNRESET)
	eventually(t, "a probe in flight", func() bool { return s.inFlight.Load() == 1 })
	m.WatchError(syscall.ECONNRESET)
	eventually(t, "a second probe", func() bool { return s.probes.Load() >= 2 })
}

// probeCounter counts one Monitor's probes under way, and fails the test
// (through bad) if two overlap or one is sent once the Monitor has
// finished.
type probeCounter struct {
	inFlight atomic.Int32
	sent     atomic.Int32
	finished atomic.Bool
	bad      func(string)
}

// begin counts a probe being sent; end, once it has its answer.
func (c *probeCounter) begin() {
	if c.finished.Load() {
		c.bad("probe sent after the Monitor finished")
	}
	if n := c.inFlight.Add(1); n > 1 {
		c.bad(fmt.Sprintf("%d probes of one Monitor in flight", n))
	}
	c.sent.Add(1)
}

func (c *probeCounter) end() { c.inFlight.Add(-1) }

// countingRoundTripper is a probeCounter in front of a real transport.
type countingRoundTripper struct {
	probeCounter
	next http.RoundTripper
}

func (c *countingRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	c.begin()
	defer c.end()
	return c.next.RoundTrip(req)
}

// raceEvents checks what a Monitor tells while its schedule is attacked:
// no probe is told once it finished, or after Reconnected or Rejected by a
// probe.
type raceEvents struct {
	rt                        *countingRoundTripper
	ended                     atomic.Bool // Reconnected, or Rejected by a probe
	reconnected, rejectedLate atomic.Int32
}

func (e *raceEvents) Probed(Result) {
	if e.rt.finished.Load() || e.ended.Load() {
		e.rt.bad("probe told after the Monitor finished, was Reconnected or was Rejected")
	}
}
func (e *raceEvents) Unreachable(error) {}
func (e *raceEvents) Reconnected() {
	e.reconnected.Add(1)
	e.ended.Store(true)
}
func (e *raceEvents) Recovered() {}
func (e *raceEvents) Rejected(err error) {
	if strings.Contains(err.Error(), "still refused") {
		e.rejectedLate.Add(1)
		e.ended.Store(true)
	}
}
func (e *raceEvents) Refused(error)     {}
func (e *raceEvents) Accepted()         {}
func (e *raceEvents) WatchFailed(error) {}

// Requests without an answer, refusals, API servers hanging, failing,
// refusing and answering, and contexts ending, all at random and from
// several goroutines at once, against Monitors that share a Limiter: a
// Monitor never has two probes in flight, never probes once finished (a
// Monitor started after it on the same API server would overlap it), and
// always finishes.
func TestRacesNeverOverlapProbes(t *testing.T) {
	leakcheck.Cleanup(t)
	lim := NewLimiter(2)
	const members, rounds = 6, 100
	var sent, reconnected, rejected, selfEnded atomic.Int32
	var wg sync.WaitGroup
	for i := range members {
		s := newAPIServer(t, 0)
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		wg.Go(func() {
			for r := range rounds {
				rt := &countingRoundTripper{next: tr}
				rt.bad = func(what string) { t.Errorf("member %d, round %d: %s", i, r, what) }
				ev := &raceEvents{rt: rt}
				m, err := New(&rest.Config{Host: s.URL, Transport: rt}, Options{
					Interval:       time.Duration(1+rand.IntN(4)) * time.Millisecond,
					OutageInterval: time.Millisecond,
					Timeout:        20 * time.Millisecond,
					Limit:          lim,
					RefreshGrace:   10 * time.Millisecond,
				}, ev)
				if err != nil {
					t.Error(err)
					return
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				m.Start(ctx, func() {
					if n := rt.inFlight.Load(); n != 0 {
						rt.bad(fmt.Sprintf("finished with %d probes in flight", n))
					}
					m.sched.mu.Lock()
					if m.sched.timer != nil && m.sched.timer.Stop() {
						rt.bad("finished with its timer pending")
					}
					m.sched.mu.Unlock()
					rt.finished.Store(true)
					close(done)
				})
				var attackers sync.WaitGroup
				for range 3 {
					attackers.Go(func() {
						for {
							select {
							case <-done:
								return
							default:
							}
							switch rand.IntN(6) {
							case 0, 1:
								m.WatchError(syscall.ECONNRESET)
							case 2:
								m.refused(errors.New("credentials rejected: GET /api answered 401"))
							case 3:
								s.mode.Store(rand.Int32N(4))
							case 4:
								s.mode.Store(0)
							case 5:
								runtime.Gosched()
							}
							time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
						}
					})
				}
				select {
				case <-done:
					selfEnded.Add(1)
				case <-time.After(time.Duration(rand.IntN(30)) * time.Millisecond):
				}
				cancel()
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					t.Errorf("member %d, round %d: Monitor not finished 5s after its context ended", i, r)
				}
				attackers.Wait()
				sent.Add(rt.sent.Load())
				reconnected.Add(ev.reconnected.Load())
				rejected.Add(ev.rejectedLate.Load())
				if t.Failed() {
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d probes; %d Monitors ended by themselves (%d Reconnected, %d Rejected), the others by their context", sent.Load(), selfEnded.Load(), reconnected.Load(), rejected.Load())
	if sent.Load() < members*rounds {
		t.Errorf("%d probes in %d rounds: the attack did not probe", sent.Load(), members*rounds)
	}
}
