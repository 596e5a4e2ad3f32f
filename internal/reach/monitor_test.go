package reach

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/internal/leakcheck"
)

// apiServer answers /version, or hangs, or fails, as told.
type apiServer struct {
	*httptest.Server
	mode     atomic.Int32 // 0 answer, 1 hang, 2 answer 503, 3 answer 401
	hangOnce atomic.Bool  // hang the next request only
	latency  time.Duration
	inFlight atomic.Int32
	maxIn    atomic.Int32
	probes   atomic.Int32
	release  chan struct{}
}

func newAPIServer(t testing.TB, latency time.Duration) *apiServer {
	s := &apiServer{latency: latency, release: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		for m := s.maxIn.Load(); n > m && !s.maxIn.CompareAndSwap(m, n); m = s.maxIn.Load() {
		}
		s.probes.Add(1)
		if s.latency > 0 {
			time.Sleep(s.latency)
		}
		mode := s.mode.Load()
		if s.hangOnce.CompareAndSwap(true, false) {
			mode = 1
		}
		switch mode {
		case 1:
			select {
			case <-r.Context().Done():
			case <-s.release:
			}
			return
		case 2:
			http.Error(w, "no backend", http.StatusServiceUnavailable)
			return
		case 3:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"37","gitVersion":"v1.37.1"}`))
	}))
	t.Cleanup(func() {
		close(s.release)
		s.Close()
	})
	return s
}

// config reaches s through a transport of the test's own, closed when it
// ends, so that no idle connection outlives it.
func (s *apiServer) config(t testing.TB) *rest.Config {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &rest.Config{Host: s.URL, Transport: tr}
}

// events records what a Monitor tells.
type events struct {
	mu                         sync.Mutex
	probes                     []Result
	unreachable, reconnected   int
	recovered                  int
	rejected, watchFailed      []error
	unreachableCh, reconnectCh chan struct{}
}

func newEvents() *events {
	return &events{unreachableCh: make(chan struct{}, 10), reconnectCh: make(chan struct{}, 10)}
}

func (e *events) Probed(r Result) { e.mu.Lock(); e.probes = append(e.probes, r); e.mu.Unlock() }
func (e *events) Unreachable(error) {
	e.mu.Lock()
	e.unreachable++
	e.mu.Unlock()
	e.unreachableCh <- struct{}{}
}
func (e *events) Reconnected() {
	e.mu.Lock()
	e.reconnected++
	e.mu.Unlock()
	e.reconnectCh <- struct{}{}
}
func (e *events) Recovered() { e.mu.Lock(); e.recovered++; e.mu.Unlock() }
func (e *events) Rejected(err error) {
	e.mu.Lock()
	e.rejected = append(e.rejected, err)
	e.mu.Unlock()
}
func (e *events) WatchFailed(err error) {
	e.mu.Lock()
	e.watchFailed = append(e.watchFailed, err)
	e.mu.Unlock()
}

func (e *events) count() (probes, unreachable, reconnected int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.probes), e.unreachable, e.reconnected
}

func within(t *testing.T, d time.Duration, what string, ch <-chan struct{}) time.Duration {
	t.Helper()
	begin := time.Now()
	select {
	case <-ch:
		return time.Since(begin)
	case <-time.After(d):
		t.Fatalf("%s not within %s", what, d)
		return 0
	}
}

// start starts m under ctx; the channel is closed when m has finished
// (closed twice, it panics: done is called once).
func start(ctx context.Context, m *Monitor) <-chan struct{} {
	done := make(chan struct{})
	m.Start(ctx, func() { close(done) })
	return done
}

// run starts m until the test ends, which waits for m to finish.
func run(t *testing.T, m *Monitor) {
	ctx, cancel := context.WithCancel(context.Background())
	done := start(ctx, m)
	t.Cleanup(func() { cancel(); <-done })
}

// finished fails t unless done is closed within d.
func finished(t *testing.T, d time.Duration, what string, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("Monitor not finished within %s %s", d, what)
	}
}

// A hung API server (connections open, no answer) is found unreachable by
// the periodic probe alone, within Interval+Timeout; its answer after that
// is Reconnected, and the Monitor finishes.
func TestProbesFindAHungServerWithoutRequests(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newAPIServer(t, 0)
	ev := newEvents()
	// Long enough that a loaded machine's scheduling delays are small
	// beside them: the bound below has a second of slack, still less than
	// a second Timeout a Monitor that waited for two probes would take.
	const interval, timeout = 500 * time.Millisecond, 1500 * time.Millisecond
	m, err := New(s.config(t), Options{Interval: interval, OutageInterval: 20 * time.Millisecond, Timeout: timeout}, ev)
	if err != nil {
		t.Fatal(err)
	}
	done := start(t.Context(), m)
	deadline := time.Now().Add(5 * time.Second)
	for n, _, _ := ev.count(); n < 2; n, _, _ = ev.count() {
		if time.Now().After(deadline) {
			t.Fatal("no probes")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.mode.Store(1)
	took := within(t, 5*time.Second, "unreachable", ev.unreachableCh)
	if bound := interval + timeout + time.Second; took > bound {
		t.Errorf("hung server found after %s, want ≤ %s", took, bound)
	}
	ev.mu.Lock()
	last := ev.probes[len(ev.probes)-1]
	ev.mu.Unlock()
	if !errors.Is(last.Err, ErrNoAnswer) || last.Took < timeout {
		t.Errorf("last probe %+v, want ErrNoAnswer after the timeout", last)
	}
	// An outage, not one slow answer: a second probe goes unanswered too.
	for n := s.probes.Load() + 1; s.probes.Load() <= n; {
		time.Sleep(10 * time.Millisecond)
	}
	s.mode.Store(0)
	within(t, 5*time.Second, "reconnected", ev.reconnectCh)
	finished(t, 5*time.Second, "after Reconnected", done)
	if _, u, r := ev.count(); u != 1 || r != 1 {
		t.Errorf("told unreachable %d, reconnected %d times; want 1, 1", u, r)
	}
}

// A server error answer (what a load balancer says for a dead backend) is
// no answer from the API server; a stopped server refuses connections.
func TestProbesFindServerErrorsAndRefusals(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newAPIServer(t, 0)
	ev := newEvents()
	m, err := New(s.config(t), Options{Interval: 20 * time.Millisecond, OutageInterval: 20 * time.Millisecond, Timeout: time.Second}, ev)
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	s.mode.Store(2)
	within(t, 5*time.Second, "unreachable on 503", ev.unreachableCh)
	s.mode.Store(0)
	within(t, 5*time.Second, "reconnected", ev.reconnectCh)

	m, err = New(s.config(t), Options{Interval: 20 * time.Millisecond, OutageInterval: 20 * time.Millisecond, Timeout: time.Second}, ev)
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	s.CloseClientConnections()
	_ = s.Listener.Close()
	within(t, 5*time.Second, "unreachable when refused", ev.unreachableCh)
	ev.mu.Lock()
	last := ev.probes[len(ev.probes)-1]
	ev.mu.Unlock()
	if !errors.Is(last.Err, syscall.ECONNREFUSED) {
		t.Errorf("last probe %v, want connection refused", last.Err)
	}
}

// With the periodic probe off, a request without an answer still makes
// the Monitor probe within OutageInterval; a passing blip (the probe answers)
// changes nothing.
func TestSuspectBringsTheProbeForward(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newAPIServer(t, 0)
	ev := newEvents()
	// The Timeout is long enough that an answered probe on a loaded
	// machine is not taken for a hang.
	m, err := New(s.config(t), Options{Interval: -1, OutageInterval: 20 * time.Millisecond, Timeout: 2 * time.Second}, ev)
	if err != nil {
		t.Fatal(err)
	}
	// Before Start (the member is starting), connection errors are its
	// start's business.
	m.WatchError(syscall.ECONNREFUSED)
	run(t, m)
	time.Sleep(100 * time.Millisecond)
	if n, _, _ := ev.count(); n != 0 {
		t.Fatalf("%d probes without a reason, want 0", n)
	}
	m.WatchError(syscall.ECONNRESET)
	deadline := time.Now().Add(5 * time.Second)
	for n, _, _ := ev.count(); n < 1; n, _, _ = ev.count() {
		if time.Now().After(deadline) {
			t.Fatal("no probe after a connection error")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, u, _ := ev.count(); u != 0 {
		t.Errorf("a blip made the member unreachable")
	}
	s.mode.Store(1)
	m.WatchError(syscall.ECONNRESET)
	within(t, 5*time.Second, "unreachable", ev.unreachableCh)
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if len(ev.watchFailed) != 3 {
		t.Errorf("%d watch errors recorded, want 3", len(ev.watchFailed))
	}
}

// A 401 on a watch, or on any request (the probe's included), is Rejected.
func TestRejectedCredentials(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newAPIServer(t, 0)
	ev := newEvents()
	m, err := New(s.config(t), Options{Interval: time.Hour, OutageInterval: time.Hour, Timeout: time.Second}, ev)
	if err != nil {
		t.Fatal(err)
	}
	m.WatchError(apierrors.NewUnauthorized("token expired"))
	m.WatchError(apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "", errors.New("no rule")))
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if len(ev.rejected) != 1 || !apierrors.IsUnauthorized(ev.rejected[0]) {
		t.Errorf("rejected %v, want the 401", ev.rejected)
	}
	if len(ev.watchFailed) != 1 || !apierrors.IsForbidden(ev.watchFailed[0]) {
		t.Errorf("watch errors %v, want the 403 alone", ev.watchFailed)
	}
}

// However many Monitors share a Limiter, and however slow the API server,
// no more probes than its slots are ever in flight.
func TestLimiterBoundsProbesInFlight(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newAPIServer(t, 30*time.Millisecond)
	const monitors, slots = 50, 4
	lim := NewLimiter(slots)
	ev := newEvents()
	cfg := s.config(t)
	for range monitors {
		m, err := New(rest.CopyConfig(cfg), Options{Interval: 5 * time.Millisecond, OutageInterval: 5 * time.Millisecond, Timeout: 5 * time.Second, Limit: lim}, ev)
		if err != nil {
			t.Fatal(err)
		}
		run(t, m)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.probes.Load() < 3*monitors {
		if time.Now().After(deadline) {
			t.Fatalf("only %d probes", s.probes.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if most := s.maxIn.Load(); most > slots || most < 2 {
		t.Errorf("at most %d probes in flight, want 2..%d", most, slots)
	}
	if _, u, _ := ev.count(); u != 0 {
		t.Errorf("%d members found unreachable while waiting their turn", u)
	}
}

// One slow answer — a single probe times out, the next is answered, and no
// request of the member failed meanwhile — is Unreachable and then
// Recovered, without Reconnected: the member keeps its watches and is not
// restarted, and the Monitor goes on probing.
func TestOneSlowAnswerRecoversInPlace(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newAPIServer(t, 0)
	ev := newEvents()
	// The hung probe waits out the Timeout; the answered ones must not,
	// on a loaded machine too.
	const timeout = time.Second
	m, err := New(s.config(t), Options{Interval: 50 * time.Millisecond, OutageInterval: 20 * time.Millisecond, Timeout: timeout}, ev)
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	for range 5 {
		s.hangOnce.Store(true) // the next probe times out, the one after is answered
		within(t, 5*time.Second, "unreachable", ev.unreachableCh)
		deadline := time.Now().Add(5 * time.Second)
		for {
			ev.mu.Lock()
			rec := ev.recovered
			ev.mu.Unlock()
			if rec > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("not recovered after one slow answer")
			}
			time.Sleep(5 * time.Millisecond)
		}
		ev.mu.Lock()
		ev.recovered = 0
		ev.mu.Unlock()
	}
	if _, u, r := ev.count(); u != 5 || r != 0 {
		t.Errorf("told unreachable %d, reconnected %d times; want 5, 0", u, r)
	}
	// The Monitor still probes.
	n := s.probes.Load()
	for deadline := time.Now().Add(5 * time.Second); s.probes.Load() < n+3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the Monitor stopped probing after recovering")
		}
	}
}
