package reach

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/internal/credential"
	"github.com/mccr-dev/mccr/internal/leakcheck"
)

// The tests of monitor_test.go watch outages, not credentials.
func (e *events) Refused(error) {}
func (e *events) Accepted()     {}

// credEvents records what a Monitor tells of credentials.
type credEvents struct {
	*events
	cmu        sync.Mutex
	refused    []error
	accepted   int
	rejectedCh chan error
}

func newCredEvents() *credEvents {
	return &credEvents{events: newEvents(), rejectedCh: make(chan error, 10)}
}

func (c *credEvents) Refused(err error) {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	c.refused = append(c.refused, err)
}

func (c *credEvents) Accepted() {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	c.accepted++
}

func (c *credEvents) Rejected(err error) {
	c.events.Rejected(err)
	c.rejectedCh <- err
}

func (c *credEvents) counts() (refused, accepted, rejected int) {
	c.cmu.Lock()
	refused, accepted = len(c.refused), c.accepted
	c.cmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	return refused, accepted, len(c.rejected)
}

// authServer accepts a request when its token is the one it accepts at
// the moment, and refuses it (401, with a Status) otherwise.
type authServer struct {
	*httptest.Server
	accept atomic.Pointer[string]
	probes atomic.Int32
}

func newAuthServer(t *testing.T, token string) *authServer {
	s := &authServer{}
	s.accept.Store(&token)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/version" {
			s.probes.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") != "Bearer "+*s.accept.Load() {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`)
			return
		}
		_, _ = io.WriteString(w, `{"major":"1","minor":"37"}`)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *authServer) config(t *testing.T, token string) *rest.Config {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &rest.Config{Host: s.URL, Transport: tr, BearerToken: token}
}

// get sends one request through cfg, as a member's client would.
func get(t *testing.T, cfg *rest.Config, path string) int {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(cfg.Host + path)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// A running member whose credentials are refused is told Refused, not
// Rejected: it is probed every OutageInterval, and once its credentials
// are accepted again (renewed where they are held) it is told Accepted
// and runs on, its Monitor still probing.
func TestRefusalRenewedInPlace(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newAuthServer(t, "one")
	ev := newCredEvents()
	cfg := s.config(t, "one")
	m, err := New(cfg, Options{Interval: time.Hour, OutageInterval: 20 * time.Millisecond, Timeout: time.Second, RefreshGrace: time.Minute}, ev)
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	waitRunning(t, m)
	s.accept.Store(ptr("two")) // "one" revoked
	if code := get(t, cfg, "/api/v1/configmaps"); code != http.StatusUnauthorized {
		t.Fatalf("request answered %d, want 401", code)
	}
	// Probes follow, every OutageInterval, all refused.
	before := s.probes.Load()
	eventually(t, "refused probes", func() bool { return s.probes.Load() >= before+3 })
	if r, a, rej := ev.counts(); r != 1 || a != 0 || rej != 0 {
		t.Fatalf("told refused %d, accepted %d, rejected %d times; want 1, 0, 0", r, a, rej)
	}
	ev.cmu.Lock()
	if msg := ev.refused[0].Error(); !strings.Contains(msg, "GET /api/v1/configmaps answered 401") {
		t.Errorf("refusal %q does not say which request", msg)
	}
	ev.cmu.Unlock()
	// Renewed where it is held: what the member sends is accepted.
	s.accept.Store(ptr("one"))
	eventually(t, "accepted", func() bool { _, a, _ := ev.counts(); return a == 1 })
	// The Monitor goes on, at its own pace again.
	if r, _, rej := ev.counts(); r != 1 || rej != 0 {
		t.Errorf("told refused %d, rejected %d times; want 1, 0", r, rej)
	}
	// A second refusal is a new one.
	s.accept.Store(ptr("three"))
	get(t, cfg, "/version")
	eventually(t, "refused again", func() bool { r, _, _ := ev.counts(); return r == 2 })
	s.accept.Store(ptr("one"))
	eventually(t, "accepted again", func() bool { _, a, _ := ev.counts(); return a == 2 })
}

// Credentials refused for RefreshGrace, every probe meanwhile refused, are
// Rejected, and the Monitor finishes; the error says what was refused and
// for how long, and nothing of the token.
func TestRefusalLastingTheGraceRejects(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newAuthServer(t, "secret-token-one")
	ev := newCredEvents()
	const grace = 300 * time.Millisecond
	m, err := New(s.config(t, "secret-token-one"), Options{Interval: 50 * time.Millisecond, OutageInterval: 20 * time.Millisecond, Timeout: time.Second, RefreshGrace: grace}, ev)
	if err != nil {
		t.Fatal(err)
	}
	done := start(t.Context(), m)
	waitRunning(t, m)
	s.accept.Store(ptr("other"))
	begin := time.Now()
	var rejected error
	select {
	case rejected = <-ev.rejectedCh:
	case <-time.After(10 * time.Second):
		t.Fatal("not rejected")
	}
	took := time.Since(begin)
	finished(t, 5*time.Second, "after Rejected", done)
	if took < grace {
		t.Errorf("rejected after %s, before the grace of %s", took, grace)
	}
	msg := rejected.Error()
	if !strings.Contains(msg, "GET /version answered 401 Unauthorized") || !strings.Contains(msg, "still refused") || strings.Contains(msg, "secret-token") {
		t.Errorf("rejection %q: want the refused request and how long, and no token", msg)
	}
	if r, a, rej := ev.counts(); r != 1 || a != 0 || rej != 1 {
		t.Errorf("told refused %d, accepted %d, rejected %d times; want 1, 0, 1", r, a, rej)
	}
}

// Before Start (the member starts), a refusal is Rejected at once: the
// start fails, and the next starts on whatever credentials are current.
// A 403 on discovery is Rejected at once whatever the phase.
func TestRefusedWhileStartingRejectsAtOnce(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newAuthServer(t, "one")
	ev := newCredEvents()
	cfg := s.config(t, "two")
	m, err := New(cfg, Options{CheckTimeout: time.Second, Interval: time.Hour, OutageInterval: time.Hour, Timeout: time.Second, RefreshGrace: time.Hour}, ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Check(context.Background()); err == nil {
		t.Fatal("Check passed with refused credentials")
	}
	select {
	case err := <-ev.rejectedCh:
		if !strings.Contains(err.Error(), "401") {
			t.Errorf("rejected with %v, want the 401", err)
		}
	default:
		t.Fatal("a refusal while starting was not Rejected at once")
	}
	if r, _, _ := ev.counts(); r != 0 {
		t.Errorf("told refused %d times while starting, want 0", r)
	}
}

// A 401 to a request that is to be sent once more with a fresh credential
// (credential.RetryRefused's first) is not the member's concern: only the
// second's answer is.
func TestRefusalOfARetriedRequestIsNotTold(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newAuthServer(t, "one")
	ev := newCredEvents()
	cfg := s.config(t, "one")
	m, err := New(cfg, Options{Interval: time.Hour, OutageInterval: time.Hour, Timeout: time.Second, RefreshGrace: time.Hour}, ev)
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	waitRunning(t, m)
	s.accept.Store(ptr("two"))
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The first request carries RetryRefused's mark; the answer to the
	// second (refused too) is told.
	for i, want := range []int{0, 1} {
		ctx := context.Background()
		if i == 0 {
			ctx = markedRetry(ctx, t)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/api", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if r, _, _ := ev.counts(); r != want {
			t.Errorf("request %d: told refused %d times, want %d", i+1, r, want)
		}
	}
}

// markedRetry returns ctx as RetryRefused marks its first request's: it
// sends one request through RetryRefused and keeps the context the
// transport under it saw.
func markedRetry(ctx context.Context, t *testing.T) context.Context {
	t.Helper()
	var seen context.Context
	rt := credential.RetryRefused(roundTripFunc(func(req *http.Request) (*http.Response, error) {
		seen = req.Context()
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	}))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://x/", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if !credential.Retries(seen) {
		t.Fatal("RetryRefused's first request carries no mark")
	}
	return seen
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func ptr(s string) *string { return &s }

func waitRunning(t *testing.T, m *Monitor) {
	t.Helper()
	eventually(t, "the Monitor running", m.running.Load)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
	}
}

// orderedEvents records the refusal calls in the order the Observer hears them.
type orderedEvents struct {
	*events
	mu   sync.Mutex
	told []string
}

func (o *orderedEvents) Refused(error) { o.add("refused") }
func (o *orderedEvents) Accepted()     { o.add("accepted") }

func (o *orderedEvents) add(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.told = append(o.told, s)
}

// A refused request and an accepted probe racing tell the refusal before
// the acceptance that ends it: never an Accepted with no refusal under way
// (the member would keep the refusal's error with nothing to clear it).
func TestRefusedIsToldBeforeTheAcceptanceThatEndsIt(t *testing.T) {
	for round := range 2000 {
		ev := &orderedEvents{events: newEvents()}
		m, err := New(&rest.Config{Host: "https://127.0.0.1:1"}, Options{Interval: time.Hour, OutageInterval: time.Hour, Timeout: time.Second, RefreshGrace: time.Hour}, ev)
		if err != nil {
			t.Fatal(err)
		}
		m.running.Store(true)
		var wg sync.WaitGroup
		wg.Go(func() { m.refused(io.ErrUnexpectedEOF) })
		wg.Go(func() { m.judge(Result{At: time.Now()}) })
		wg.Wait()
		ev.mu.Lock()
		told := ev.told
		ev.mu.Unlock()
		if len(told) > 0 && told[0] != "refused" {
			t.Fatalf("round %d: told %v, want refused before accepted", round, told)
		}
	}
}
