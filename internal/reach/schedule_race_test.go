package reach

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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

// stubAPI is an API server in a RoundTripper: it answers a probe at once
// (or hangs until the probe gives up) as its mode says, without a socket,
// so that a test can run thousands of Monitors through every interleaving
// of their schedules. It fails the test (through bad) if one Monitor's
// probes overlap, or if one is sent once the Monitor has finished.
type stubAPI struct {
	probeCounter
	mode      atomic.Int32 // 0 answer, 1 hang, 2 answer 503, 3 answer 401, 4 refuse the connection
	lastSent  atomic.Int64 // UnixNano of the last probe sent
	deadSends atomic.Int32 // probes sent once the Monitor's context had ended
	ctx       context.Context
}

func (s *stubAPI) RoundTrip(req *http.Request) (*http.Response, error) {
	s.begin()
	defer s.end()
	if s.ctx.Err() != nil {
		s.deadSends.Add(1)
	}
	s.lastSent.Store(time.Now().UnixNano())
	answer := func(code int, body string) (*http.Response, error) {
		return &http.Response{
			StatusCode: code,
			Header:     http.Header{"Content-Type": {"application/json"}},
			Body:       io.NopCloser(bytes.NewBufferString(body)),
			Request:    req,
		}, nil
	}
	switch s.mode.Load() {
	case 1:
		<-req.Context().Done()
		return nil, req.Context().Err()
	case 2:
		return answer(http.StatusServiceUnavailable, `no backend`)
	case 3:
		return answer(http.StatusUnauthorized, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`)
	case 4:
		return nil, &netError{syscall.ECONNREFUSED}
	}
	return answer(http.StatusOK, `{"major":"1","minor":"37","gitVersion":"v1.37.1"}`)
}

// netError is a refused connection, as net/http reports one.
type netError struct{ err error }

func (e *netError) Error() string   { return "dial tcp 127.0.0.1:1: connect: " + e.err.Error() }
func (e *netError) Unwrap() error   { return e.err }
func (e *netError) Timeout() bool   { return false }
func (e *netError) Temporary() bool { return false }

// modelEvents checks what a Monitor tells against what the old single
// goroutine loop could tell, in order: Unreachable once per outage, and
// Recovered or Reconnected only after it; nothing from a probe once the
// Monitor was Reconnected, Rejected by a probe, or finished; done once.
type modelEvents struct {
	api *stubAPI

	mu        sync.Mutex
	down      bool // told Unreachable, and not Recovered since
	ended     bool // told Reconnected, or Rejected by a probe
	finished  bool // done was called
	dones     int
	told      []string // the last events, for failures
	probes    int
	endedHow  string
	rejectedE int // Rejected told by a request, not a probe
}

func (e *modelEvents) note(what string) {
	e.told = append(e.told, what)
	if len(e.told) > 12 {
		e.told = e.told[1:]
	}
}

// fromProbe checks an event only a probe tells; call it with mu held.
func (e *modelEvents) fromProbe(what string) {
	e.note(what)
	switch {
	case e.finished:
		e.api.bad(fmt.Sprintf("%s told after the Monitor finished (told: %v)", what, e.told))
	case e.ended:
		e.api.bad(fmt.Sprintf("%s told after it was %s (told: %v)", what, e.endedHow, e.told))
	}
}

func (e *modelEvents) Probed(Result) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.probes++
	e.fromProbe("Probed")
}

func (e *modelEvents) Unreachable(error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fromProbe("Unreachable")
	if e.down {
		e.api.bad(fmt.Sprintf("Unreachable told twice in one outage (told: %v)", e.told))
	}
	e.down = true
}

func (e *modelEvents) Recovered() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fromProbe("Recovered")
	if !e.down {
		e.api.bad(fmt.Sprintf("Recovered told without an outage (told: %v)", e.told))
	}
	e.down = false
}

func (e *modelEvents) Reconnected() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fromProbe("Reconnected")
	if !e.down {
		e.api.bad(fmt.Sprintf("Reconnected told without an outage (told: %v)", e.told))
	}
	e.ended, e.endedHow = true, "Reconnected"
}

func (e *modelEvents) Rejected(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !strings.Contains(err.Error(), "still refused") {
		// A refusal while the Monitor is not running (before Start, or
		// once it finished) is Rejected at once, from the request.
		e.note("Rejected at once")
		e.rejectedE++
		return
	}
	e.fromProbe("Rejected")
	e.ended, e.endedHow = true, "Rejected"
}

func (e *modelEvents) Accepted() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fromProbe("Accepted")
}

func (e *modelEvents) Refused(error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.note("Refused")
}

func (e *modelEvents) WatchFailed(error) {}

// done is the Monitor's done: nothing may run or be pending then.
func (e *modelEvents) done(m *Monitor) {
	if n := e.api.inFlight.Load(); n != 0 {
		e.api.bad(fmt.Sprintf("finished with %d probes in flight", n))
	}
	m.sched.mu.Lock()
	if m.sched.probing {
		e.api.bad("finished while a probe runs")
	}
	if m.sched.armed {
		e.api.bad("finished with a call of its timer's to come")
	}
	if m.sched.timer != nil && m.sched.timer.Stop() {
		e.api.bad("finished with its timer pending")
	}
	m.sched.mu.Unlock()
	if m.running.Load() {
		e.api.bad("finished, and still running")
	}
	e.api.finished.Store(true)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.dones++
	e.finished = true
	if e.dones > 1 {
		e.api.bad("done called twice")
	}
}

// Thousands of Monitors, each attacked from several goroutines from
// before its Start until after it finished: requests without an answer
// and refusals at random, the API server changing its mind between every
// kind of answer, probes waiting for a shared Limiter's one slot, contexts
// ending before Start, during it, during a probe or between probes. Every
// Monitor must tell only what the old loop could have told, in its order;
// never overlap its probes; never probe once finished; finish exactly
// once, with nothing running or pending; with a periodic probe, always have
// a probe running or due while it runs; and never lose a request for a
// probe: one brought forward while the Monitor runs is sent within
// OutageInterval (plus the slack of a loaded machine).
func TestScheduleUnderRandomRaces(t *testing.T) {
	leakcheck.Cleanup(t)
	lim := NewLimiter(1)
	const workers, rounds = 4, 250
	var monitors, sent, selfEnded, lateRejects, deadSends atomic.Int32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				bad := func(what string) { t.Errorf("worker %d, round %d: %s", w, r, what) }
				api := &stubAPI{probeCounter: probeCounter{bad: bad}}
				api.mode.Store(rand.Int32N(5))
				ev := &modelEvents{api: api}
				o := Options{
					Interval:       []time.Duration{0, time.Millisecond, time.Hour}[rand.IntN(3)],
					OutageInterval: []time.Duration{0, time.Millisecond, 3 * time.Millisecond}[rand.IntN(3)],
					Timeout:        5 * time.Millisecond,
					RefreshGrace:   []time.Duration{0, 5 * time.Millisecond, time.Hour}[rand.IntN(3)],
				}
				if rand.IntN(2) == 0 {
					o.Limit = lim
				}
				m, err := New(&rest.Config{Host: "http://member.invalid", Transport: api}, o, ev)
				if err != nil {
					t.Error(err)
					return
				}
				monitors.Add(1)
				ctx, cancel := context.WithCancel(context.Background())
				api.ctx = ctx
				done := make(chan struct{})
				stopAttack := make(chan struct{})
				var attackers sync.WaitGroup
				for range 3 {
					attackers.Go(func() {
						for {
							select {
							case <-stopAttack:
								return
							default:
							}
							switch rand.IntN(7) {
							case 0, 1:
								m.WatchError(&netError{syscall.ECONNRESET})
							case 2:
								m.refused(errors.New("credentials rejected: GET /api answered 401 Unauthorized"))
							case 3:
								api.mode.Store(rand.Int32N(5))
							case 4:
								api.mode.Store(0)
							case 5:
								if rand.IntN(20) == 0 {
									cancel()
								}
							case 6:
								// With a periodic probe, a Monitor that runs
								// always has one running or due.
								m.sched.mu.Lock()
								if o.Interval > 0 && m.sched.started && !m.sched.over && !m.sched.armed && !m.sched.probing {
									bad(fmt.Sprintf("running with no probe running or due (opts %+v)", o))
								}
								m.sched.mu.Unlock()
							}
							time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
						}
					})
				}
				switch rand.IntN(8) {
				case 0:
					cancel() // before Start
				case 1:
					go cancel() // during Start
				}
				time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
				m.Start(ctx, func() { ev.done(m); close(done) })
				select {
				case <-done:
					selfEnded.Add(1)
				case <-time.After(time.Duration(rand.IntN(15)) * time.Millisecond):
				}
				close(stopAttack)
				attackers.Wait()
				// Liveness: with the attack over, the API server answering,
				// a request without an answer brings a probe within
				// OutageInterval, unless the Monitor finished meanwhile.
				api.mode.Store(0)
				asked := time.Now().UnixNano()
				m.WatchError(&netError{syscall.ECONNRESET})
				for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(100 * time.Microsecond) {
					select {
					case <-done:
					default:
						if api.lastSent.Load() < asked {
							if time.Now().After(deadline) {
								m.sched.mu.Lock()
								bad(fmt.Sprintf("a probe brought forward was not sent within 3s (opts %+v; armed %v, probing %v, over %v, due in %s)", o, m.sched.armed, m.sched.probing, m.sched.over, time.Until(m.sched.due)))
								m.sched.mu.Unlock()
								break
							}
							continue
						}
					}
					break
				}
				cancel()
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					bad("not finished 5s after its context ended")
				}
				// Once finished, a refusal is the request's to report: at
				// once, and never a probe.
				m.refused(errors.New("credentials rejected: GET /api answered 401 Unauthorized"))
				m.WatchError(&netError{syscall.ECONNRESET})
				sent.Add(api.sent.Load())
				deadSends.Add(api.deadSends.Load())
				ev.mu.Lock()
				if ev.ended {
					lateRejects.Add(1)
				}
				ev.mu.Unlock()
				if t.Failed() {
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d Monitors, %d probes; %d finished before the test ended them, %d by Reconnected or Rejected; %d probes sent on an ended context", monitors.Load(), sent.Load(), selfEnded.Load(), lateRejects.Load(), deadSends.Load())
}

// A context that ends while the timer's callback has started and waits
// for the schedule (the timer can no longer be stopped) finishes the
// Monitor once, after that callback, whichever of the two runs first; and
// the probe that callback was for is not sent.
func TestContextEndsAsTheTimerFires(t *testing.T) {
	leakcheck.Cleanup(t)
	for i := range 200 {
		api := &stubAPI{probeCounter: probeCounter{bad: func(what string) { t.Errorf("#%d: %s", i, what) }}}
		ev := &modelEvents{api: api}
		m, err := New(&rest.Config{Host: "http://member.invalid", Transport: api}, Options{Interval: time.Millisecond, OutageInterval: time.Millisecond, Timeout: time.Second}, ev)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		api.ctx = ctx
		done := make(chan struct{})
		m.Start(ctx, func() { ev.done(m); close(done) })
		// Hold the schedule until its timer has fired and its callback
		// waits for it; end the context meanwhile.
		m.sched.mu.Lock()
		for !waitsForSchedule(1) {
			m.sched.mu.Unlock()
			runtime.Gosched()
			m.sched.mu.Lock()
			if m.sched.probing || !m.sched.armed {
				// The callback got in first and probes: start again.
				break
			}
		}
		cancel()
		m.sched.mu.Unlock()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("#%d: not finished after its context ended", i)
		}
		if t.Failed() {
			return
		}
	}
}

// waitsForSchedule reports whether n goroutines run a timer's callback of
// a schedule and wait for its lock.
func waitsForSchedule(n int) bool {
	buf := make([]byte, 1<<20)
	stacks := strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n")
	waiting := 0
	for _, s := range stacks {
		if strings.Contains(s, "sync.(*Mutex).Lock") && strings.Contains(s, "reach.(*schedule).fire") {
			waiting++
		}
	}
	return waiting >= n
}
