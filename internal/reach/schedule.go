package reach

import (
	"context"
	"sync"
	"time"
)

// schedule runs a Monitor's probes, one at a time, each when it is due,
// without a goroutine of its own. Between probes a Monitor is a runtime
// timer (time.AfterFunc) and a callback on its context (context.AfterFunc,
// which costs a goroutine only once the context ends); a probe runs in the
// goroutine the timer starts for it, and that goroutine ends with the
// probe, after arming the timer for the next one. An idle fleet of
// thousands of members thus holds no goroutine for its probes, and the
// runtime's timers are the only scheduler they need.
//
// The timer is reset only while no call of fire is outstanding (armed is
// false), so that one arming makes at most one call of fire: fire never
// runs twice for one due probe, and a probe never overlaps another of the
// same Monitor.
type schedule struct {
	mu sync.Mutex
	// ctx is Start's: the Monitor's lifetime, and its probes' context.
	ctx context.Context
	m   *Monitor
	// timer calls fire; made by the first arm.
	timer *time.Timer
	// armed says the timer will call fire once more: it is pending, or
	// has fired and fire does not hold mu yet.
	armed bool
	// due is when the next probe is due; zero: none (no periodic probe,
	// and nothing brought one forward).
	due time.Time
	// probing says a probe runs (or waits for a Limiter slot).
	probing bool
	// hurried says the next probe was asked for early while one ran.
	hurried bool
	// over says no probe is to run any more: ctx ended, or the member was
	// Reconnected or Rejected.
	over bool
	// finished says done was called (or is being).
	finished bool
	started  bool
	done     func()
	// unregister drops the callback on ctx, once the Monitor is finished
	// for another reason.
	unregister func() bool
}

func (s *schedule) start(ctx context.Context, m *Monitor, done func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		panic("reach: Monitor started twice")
	}
	s.started, s.ctx, s.m, s.done = true, ctx, m, done
	m.running.Store(true)
	if due, ok := m.next(); ok {
		s.arm(due)
	}
	// Its callback runs in a goroutine of its own, never within this
	// call: holding mu is safe.
	s.unregister = context.AfterFunc(ctx, s.stop)
}

// arm makes the next probe due at due. Call it with mu held and no probe
// running.
func (s *schedule) arm(due time.Time) {
	s.due = due
	d := time.Until(due)
	switch {
	case s.timer == nil:
		s.timer, s.armed = time.AfterFunc(d, s.fire), true
	case !s.armed:
		s.timer.Reset(d)
		s.armed = true
	case s.timer.Stop():
		// The timer was pending, for some other time: it is now for due.
		s.timer.Reset(d)
	default:
		// The timer has fired and fire waits for mu: it will find due.
	}
}

// fire is the timer's: it runs the probe that is due, in the timer's
// goroutine, and arms the timer for the next.
func (s *schedule) fire() {
	s.mu.Lock()
	s.armed = false
	switch {
	case s.over || s.probing || s.due.IsZero():
		done := s.settle()
		s.mu.Unlock()
		call(done)
		return
	case time.Now().Before(s.due):
		// The timer fired for an earlier due that has since moved on.
		s.arm(s.due)
		s.mu.Unlock()
		return
	}
	s.probing, s.due = true, time.Time{}
	ctx := s.ctx
	s.mu.Unlock()

	over := s.m.round(ctx)
	due, periodic := time.Time{}, false
	if !over {
		due, periodic = s.m.next()
	}

	s.mu.Lock()
	s.probing = false
	switch {
	case over:
		s.over = true
	case s.over:
	default:
		if s.hurried {
			if soon := time.Now().Add(s.m.o.OutageInterval); !periodic || soon.Before(due) {
				due, periodic = soon, true
			}
		}
		if periodic {
			s.arm(due)
		}
	}
	s.hurried = false
	done := s.settle()
	s.mu.Unlock()
	call(done)
}

// hurry brings the next probe forward to OutageInterval from now, or
// right after the probe that runs: a request got no answer, or the
// credentials were refused.
func (s *schedule) hurry() {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.started || s.over:
	case s.probing:
		s.hurried = true
	default:
		if soon := time.Now().Add(s.m.o.OutageInterval); s.due.IsZero() || soon.Before(s.due) {
			s.arm(soon)
		}
	}
}

// stop is the callback on ctx: no probe is to run any more.
func (s *schedule) stop() {
	s.mu.Lock()
	s.over, s.due = true, time.Time{}
	if s.armed && s.timer.Stop() {
		s.armed = false
	}
	done := s.settle()
	s.mu.Unlock()
	call(done)
}

// settle finishes the Monitor once it is over and neither a probe nor a
// call of fire is left, and returns done to be called without mu held;
// nil if it is not yet finished, or was already.
func (s *schedule) settle() func() {
	if !s.over || s.probing || s.armed || s.finished {
		return nil
	}
	s.finished = true
	s.m.running.Store(false)
	s.unregister()
	if s.done == nil {
		return func() {}
	}
	return s.done
}

func call(f func()) {
	if f != nil {
		f()
	}
}
