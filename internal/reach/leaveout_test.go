package reach

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mccr-dev/mccr/internal/leakcheck"
)

// busyFlag is an Options.Busy that notes, at each question, how many
// probes the server had answered and what it said.
type busyFlag struct {
	s    *apiServer
	busy atomic.Bool
	mu   sync.Mutex
	asks []ask
}

type ask struct {
	probes int32
	busy   bool
}

func (b *busyFlag) Busy() bool {
	busy := b.busy.Load()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asks = append(b.asks, ask{b.s.probes.Load(), busy})
	return busy
}

// between counts, for each gap between two probes the server answered
// (from probe k to probe k+1, k < last), the questions asked in it, of
// gaps whose questions were all answered busy (or all not busy).
func (b *busyFlag) between(busy bool, last int32) (counts []int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	byGap := map[int32][]bool{}
	for _, a := range b.asks {
		byGap[a.probes] = append(byGap[a.probes], a.busy)
	}
	for k := int32(1); k < last; k++ {
		said := byGap[k]
		if len(said) > 0 && !slices.ContainsFunc(said, func(v bool) bool { return v != busy }) {
			counts = append(counts, len(said))
		}
	}
	return counts
}

// waitProbes waits until the server has answered n more probes than now.
func waitProbes(t *testing.T, s *apiServer, n int32, within time.Duration, what string) {
	t.Helper()
	want := s.probes.Load() + n
	deadline := time.Now().Add(within)
	for s.probes.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d probes within %s, want %d", what, s.probes.Load()-want+n, within, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBusyLeavesOutProbesOfAnAnsweringMember: while Busy says so, a member
// that answers has MaxLeftOut periodic probes in a row left out, and the
// next one runs; once Busy says no more, every periodic probe runs.
func TestBusyLeavesOutProbesOfAnAnsweringMember(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newAPIServer(t, 0)
	b := busyFlag{s: s}
	b.busy.Store(true)
	const interval, leftOut = 20 * time.Millisecond, 3
	m, err := New(s.config(t), Options{Interval: interval, OutageInterval: interval, Timeout: time.Second, Busy: b.Busy, MaxLeftOut: leftOut}, newEvents())
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)

	// Busy: between two probes, leftOut were left out, each of which
	// asked Busy; the probe itself does not ask.
	waitProbes(t, s, 4, 10*time.Second, "busy")
	// Probes run no closer than leftOut+1 intervals apart.
	begin := time.Now()
	waitProbes(t, s, 2, 10*time.Second, "busy")
	if took := time.Since(begin); took < (leftOut+1)*interval {
		t.Errorf("two probes within %s while busy, want at least %s between them", took, (leftOut+1)*interval)
	}

	// Not busy: every round probes, and asks Busy once.
	b.busy.Store(false)
	waitProbes(t, s, 4, 10*time.Second, "no longer busy")
	last := s.probes.Load()
	busy, idle := b.between(true, last), b.between(false, last)
	if len(busy) < 3 || len(idle) < 2 {
		t.Fatalf("%d gaps between probes while busy and %d after, want at least 3 and 2", len(busy), len(idle))
	}
	for _, n := range busy {
		if n != leftOut {
			t.Errorf("busy: %d probes left out between two that ran, want %d: %v", n, leftOut, busy)
			break
		}
	}
	for _, n := range idle {
		if n != 1 {
			t.Errorf("not busy: Busy asked %d times between two probes, want once: %v", n, idle)
			break
		}
	}
}

// TestBusyLeavesNoProbeOutOfATroubledMember: however busy, a member whose
// request got no answer is probed within OutageInterval, one that is down
// every OutageInterval until it answers, and one whose credentials are
// refused every OutageInterval.
func TestBusyLeavesNoProbeOutOfATroubledMember(t *testing.T) {
	leakcheck.Cleanup(t)
	const interval, outage = time.Second, 20 * time.Millisecond
	always := func() bool { return true }
	opts := Options{Interval: interval, OutageInterval: outage, Timeout: 100 * time.Millisecond, Busy: always, MaxLeftOut: 1000, RefreshGrace: time.Minute}

	t.Run("request without an answer", func(t *testing.T) {
		s := newAPIServer(t, 0)
		m, err := New(s.config(t), opts, newEvents())
		if err != nil {
			t.Fatal(err)
		}
		run(t, m)
		m.WatchError(syscall.ECONNREFUSED)
		// Left out, the next probe would come in 1000 intervals.
		waitProbes(t, s, 1, 10*interval/2, "after a watch got no answer")
	})

	t.Run("down", func(t *testing.T) {
		s := newAPIServer(t, 0)
		ev := newEvents()
		m, err := New(s.config(t), opts, ev)
		if err != nil {
			t.Fatal(err)
		}
		done := start(t.Context(), m)
		s.mode.Store(1)
		m.WatchError(syscall.ECONNRESET)
		within(t, 10*time.Second, "unreachable", ev.unreachableCh)
		waitProbes(t, s, 2, 5*interval/2, "while down")
		s.mode.Store(0)
		within(t, 5*interval/2, "reconnected, probed every OutageInterval", ev.reconnectCh)
		finished(t, 5*time.Second, "after Reconnected", done)
	})

	t.Run("credentials refused", func(t *testing.T) {
		s := newAPIServer(t, 0)
		m, err := New(s.config(t), opts, newEvents())
		if err != nil {
			t.Fatal(err)
		}
		s.mode.Store(3)
		run(t, m)
		m.refused(errors.New("credentials rejected: 401"))
		waitProbes(t, s, 3, 5*interval/2, "while refused")
	})
}
