package shard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

// simStart is the fake clock's start.
var simStart = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// sim runs replicas' coordinators step by step on a fake clock against one
// fake API server, and records which replica runs which cluster when.
type sim struct {
	t     *testing.T
	clock *clocktesting.FakeClock
	store *store
	names []string
	// stopDelay is how long a member takes to stop (its graceful shutdown).
	stopDelay time.Duration
	reps      []*simReplica
	rec       *ledger
	// quiet drops the replicas' log lines; shuffle, if set, orders their
	// steps at random.
	quiet   bool
	shuffle *rand.Rand
}

type simReplica struct {
	id      string
	c       *Coordinator
	leases  *fakeLeases
	members *simMembers
	down    bool // crashed: no steps, nothing runs
	// busyUntil: its loop is stuck in calls that hang until then (its
	// watchdog is not).
	busyUntil time.Time
	stale     bool // its watch delivers nothing
	lines     *lineCounter
}

func newSim(t *testing.T, clusters int) *sim {
	s := &sim{t: t, clock: clocktesting.NewFakeClock(simStart), store: newStore("ns"), stopDelay: 300 * time.Millisecond}
	for i := range clusters {
		s.names = append(s.names, fmt.Sprintf("fleet/c%02d", i))
	}
	s.rec = &ledger{clock: s.clock, running: map[string]map[string]*stint{}, starts: map[string]map[string]int{}}
	return s
}

// timing is a replica's LeaseDuration, RenewDeadline and RetryPeriod.
type timing struct{ lease, renew, retry time.Duration }

var defaultTiming = timing{8 * time.Second, 4 * time.Second, time.Second}

// add starts a replica: id with group "fleet" unless o says otherwise.
func (s *sim) add(id string, tm timing, o Options) *simReplica {
	return s.addClock(id, tm, o, s.clock)
}

// addClock is add with a clock of the replica's own.
func (s *sim) addClock(id string, tm timing, o Options, clk clock.WithTicker) *simReplica {
	if o.Group == "" {
		o.Group = "fleet"
	}
	o.Identity, o.Namespace = id, s.store.ns
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = tm.lease, tm.renew, tm.retry
	o.Clock = clk
	lines := &lineCounter{quiet: s.quiet}
	o.Logger = lines.logger(s.t, id)
	if o.Writer == "" {
		o.Writer = fmt.Sprintf("%s-%d", id, len(s.reps))
	}
	r := &simReplica{id: id, lines: lines}
	r.leases = &fakeLeases{s: s.store, clock: s.clock}
	r.leases.onHang = func() {
		r.busyUntil = later(r.busyUntil, s.clock.Now()).Add(max(tm.retry, tm.renew/3))
	}
	r.members = &simMembers{s: s, r: r}
	r.c = New(r.leases, r.members, o)
	r.c.cache.relist(s.store.list())
	s.reps = append(s.reps, r)
	return r
}

// step runs one period: every live replica's watchdog and loop, then the
// members' stops that are due.
func (s *sim) step() {
	reps := s.reps
	if s.shuffle != nil {
		reps = slices.Clone(reps)
		s.shuffle.Shuffle(len(reps), func(i, j int) { reps[i], reps[j] = reps[j], reps[i] })
	}
	for _, r := range reps {
		if r.down {
			continue
		}
		if !r.stale && r.leases.reachable() {
			r.c.cache.relist(s.store.list())
		}
		r.c.fenceIfOverdue()
		if s.clock.Now().Before(r.busyUntil) {
			continue
		}
		r.c.step(context.Background())
	}
	s.clock.Step(period)
	s.rec.tick(period, s.names)
}

// reachable reports whether a watch of this client would deliver now.
func (f *fakeLeases) reachable() bool {
	f.mu.Lock()
	fn := f.fault
	f.mu.Unlock()
	return fn == nil || fn("watch", "") == pass
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// run steps for d of fake time.
func (s *sim) run(d time.Duration) {
	for end := s.clock.Now().Add(d); s.clock.Now().Before(end); {
		s.step()
	}
}

// until steps until cond holds, for at most d; it returns how long it took.
func (s *sim) until(d time.Duration, what string, cond func() bool) time.Duration {
	s.t.Helper()
	start := s.clock.Now()
	for !cond() {
		if s.clock.Since(start) > d {
			s.t.Fatalf("%s: not within %s of fake time; running: %v", what, d, s.rec.owners())
		}
		s.step()
	}
	return s.clock.Since(start)
}

// settled reports whether every cluster runs on exactly one replica.
func (s *sim) settled() bool {
	owners := s.rec.owners()
	for _, n := range s.names {
		if len(owners[n]) != 1 {
			return false
		}
	}
	return true
}

// balanced reports whether every cluster runs on exactly one replica and
// every live replica runs some: the replicas have seen each other.
func (s *sim) balanced() bool {
	live := 0
	for _, r := range s.reps {
		if !r.down {
			live++
		}
	}
	return s.settled() && len(s.load()) == live
}

// crash kills a replica: its members stop at once, it does nothing more.
func (s *sim) crash(r *simReplica) {
	r.down = true
	s.rec.crash(r.id)
}

// simMembers is a replica's fleet: every cluster of the sim, its starts and
// stops recorded in the ledger.
type simMembers struct {
	s *sim
	r *simReplica
}

func (m *simMembers) Names() []Member {
	out := make([]Member, 0, len(m.s.names))
	for _, n := range m.s.names {
		out = append(out, Member{Name: n})
	}
	return out
}
func (m *simMembers) Own(name string) { m.s.rec.start(m.r.id, name) }
func (m *simMembers) Disown(name, _ string) <-chan struct{} {
	return m.s.rec.stop(m.r.id, name, m.s.stopDelay)
}
func (m *simMembers) StopAll() {
	for _, n := range m.s.names {
		m.s.rec.stop(m.r.id, n, m.s.stopDelay)
	}
}

// ledger records, in fake time, which replica runs which cluster: from Own
// until its stop has completed. It adds up the time clusters ran on two
// replicas at once (overlap) and on none (dark).
type ledger struct {
	mu      sync.Mutex
	clock   *clocktesting.FakeClock
	running map[string]map[string]*stint // cluster → replica → stint
	starts  map[string]map[string]int    // replica → cluster → starts
	overlap time.Duration
	dark    map[string]time.Duration // cluster → current dark run
	maxDark time.Duration            // longest dark run since resetDark
	doubles []string
}

type stint struct {
	stopAt time.Time // zero while running
	done   chan struct{}
}

func (l *ledger) start(id, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running[name] == nil {
		l.running[name] = map[string]*stint{}
	}
	if st := l.running[name][id]; st != nil && st.stopAt.IsZero() {
		return // runs already
	}
	for other := range l.running[name] {
		if other != id {
			l.doubles = append(l.doubles, fmt.Sprintf("%s started on %s at %s while on %s", name, id, l.clock.Since(simStart), other))
		}
	}
	if l.running[name][id] != nil {
		l.doubles = append(l.doubles, fmt.Sprintf("%s started on %s again before it stopped there", name, id))
	}
	l.running[name][id] = &stint{done: make(chan struct{})}
	if l.starts[id] == nil {
		l.starts[id] = map[string]int{}
	}
	l.starts[id][name]++
}

func (l *ledger) stop(id, name string, delay time.Duration) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.running[name][id]
	if st == nil {
		return closed
	}
	if st.stopAt.IsZero() {
		st.stopAt = l.clock.Now().Add(delay)
	}
	return st.done
}

func (l *ledger) crash(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, rs := range l.running {
		if st := rs[id]; st != nil {
			close(st.done)
			delete(rs, id)
		}
	}
}

var closed = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// tick completes the stops that are due and adds dt to the overlap and
// dark times.
func (l *ledger) tick(dt time.Duration, names []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	if l.dark == nil {
		l.dark = map[string]time.Duration{}
	}
	for _, rs := range l.running { // clusters that left the fleet stop too
		for id, st := range rs {
			if !st.stopAt.IsZero() && !now.Before(st.stopAt) {
				close(st.done)
				delete(rs, id)
			}
		}
	}
	for _, n := range names {
		rs := l.running[n]
		switch len(rs) {
		case 0:
			l.dark[n] += dt
			l.maxDark = max(l.maxDark, l.dark[n])
		case 1:
			l.dark[n] = 0
		default:
			l.dark[n] = 0
			l.overlap += dt
		}
	}
}

// resetStarts counts starts afresh.
func (l *ledger) resetStarts() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.starts)
}

// resetDark starts measuring the longest dark run afresh.
func (l *ledger) resetDark() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.dark)
	l.maxDark = 0
}

func (l *ledger) owners() map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]string{}
	for n, rs := range l.running {
		for id := range rs {
			out[n] = append(out[n], id)
		}
		slices.Sort(out[n])
	}
	return out
}

func (l *ledger) startsOf(id, name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.starts[id][name]
}

// noDoubles fails t if a cluster ever ran on two replicas at once.
func (l *ledger) noDoubles(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.overlap > 0 || len(l.doubles) > 0 {
		t.Errorf("clusters ran on two replicas at once for %s in all: %v", l.overlap, l.doubles)
	}
}

// lineCounter counts a replica's log lines, by message, and logs them to
// the test.
type lineCounter struct {
	mu    sync.Mutex
	lines []string
	quiet bool // keep the lines, log none
}

func (c *lineCounter) logger(t *testing.T, id string) logr.Logger {
	return funcr.New(func(prefix, args string) {
		c.mu.Lock()
		c.lines = append(c.lines, args)
		c.mu.Unlock()
		if !c.quiet {
			t.Log(id + " " + args)
		}
	}, funcr.Options{Verbosity: 1})
}

// count returns how many lines contain s.
func (c *lineCounter) count(s string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, l := range c.lines {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}
