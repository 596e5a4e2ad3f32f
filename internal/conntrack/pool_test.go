package conntrack

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
)

// server counts the connections its clients hold open.
func server(t *testing.T) (*httptest.Server, func() int) {
	t.Helper()
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch s {
		case http.StateNew:
			open[c] = true
		case http.StateClosed, http.StateHijacked:
			delete(open, c)
		default:
		}
	}
	// HTTP/2, as API servers speak it: requests one after the other share
	// the connection without waiting for it to go back to an idle pool.
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(open)
	}
}

func get(t *testing.T, cfg *rest.Config) {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(cfg.Host + "/")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPoolSharesAndClosesWithTheLastLease(t *testing.T) {
	srv, open := server(t)
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	var p Pool

	a, err := p.Acquire(cfg)
	if err != nil {
		t.Fatal(err)
	}
	withToken := rest.CopyConfig(cfg)
	withToken.BearerToken = "b"
	b, err := p.Acquire(withToken)
	if err != nil {
		t.Fatal(err)
	}
	if a.Config.Transport != b.Config.Transport {
		t.Fatal("two configs for one server and TLS identity got different transports")
	}
	if b.Config.BearerToken != "b" || a.Config.BearerToken != "" {
		t.Error("credentials leaked between leases")
	}
	get(t, a.Config)
	get(t, b.Config)
	if n := open(); n != 1 {
		t.Errorf("%d connections for two leases, want 1 shared", n)
	}

	a.Release()
	a.Release() // idempotent
	get(t, b.Config)
	if n := open(); n != 1 {
		t.Errorf("after the first release: %d connections, want 1", n)
	}
	b.Release()
	waitFor(t, "connections closed after the last release", func() bool { return open() == 0 })

	// A new lease after that gets a working transport of its own.
	c, err := p.Acquire(cfg)
	if err != nil {
		t.Fatal(err)
	}
	get(t, c.Config)
	c.Release()
	waitFor(t, "connections closed again", func() bool { return open() == 0 })
}

func TestPoolSeparatesTLSIdentities(t *testing.T) {
	srv, _ := server(t)
	var p Pool
	a, _ := p.Acquire(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	b, _ := p.Acquire(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true, ServerName: "other"}})
	defer a.Release()
	defer b.Release()
	if a.Config.Transport == b.Config.Transport {
		t.Error("different TLS settings share a transport")
	}
}

func TestPoolSharesMappersPerIdentity(t *testing.T) {
	srv, _ := server(t)
	var p Pool
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, BearerToken: "x"}
	a, _ := p.Acquire(cfg)
	b, _ := p.Acquire(cfg)
	other := rest.CopyConfig(cfg)
	other.BearerToken = "y"
	c, _ := p.Acquire(other)
	defer a.Release()
	defer b.Release()
	defer c.Release()
	built := 0
	provider := func(l *Lease) MapperProvider {
		return l.MapperProvider(func(*rest.Config, *http.Client) (meta.RESTMapper, error) {
			built++
			return meta.NewDefaultRESTMapper(nil), nil
		})
	}
	for _, l := range []*Lease{a, b, c} {
		if _, err := provider(l)(l.Config, &http.Client{}); err != nil {
			t.Fatal(err)
		}
	}
	if built != 2 {
		t.Errorf("built %d mappers for two identities, want 2", built)
	}
	if _, err := provider(a)(a.Config, nil); err == nil {
		t.Error("a shared mapper without the lease's HTTP client, which would carry its requests: no error")
	}
}

// A config's WrapTransport is applied once, to its own tracked transport,
// and a wrapper that replaces the transport it is given keeps dialing
// through the tracker when it borrows that transport's dialer: the
// connections close with the lease, even while another lease of the same
// server is still held.
func TestPoolWrapTransportIsTracked(t *testing.T) {
	srv, open := server(t)
	plain := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	wrapped := rest.CopyConfig(plain)
	var mu sync.Mutex
	wraps := 0
	wrapped.WrapTransport = func(next http.RoundTripper) http.RoundTripper {
		mu.Lock()
		wraps++
		mu.Unlock()
		dial, err := utilnet.DialerFor(next)
		if err != nil || dial == nil {
			t.Errorf("no dialer to borrow from %T: %v", next, err)
		}
		return &http.Transport{DialContext: dial, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // G402: test server
	}
	var p Pool
	other, err := p.Acquire(plain)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	get(t, other.Config)
	l, err := p.Acquire(wrapped)
	if err != nil {
		t.Fatal(err)
	}
	if l.Config.Transport == other.Config.Transport {
		t.Fatal("a config with a WrapTransport shares the transport of one without")
	}
	for range 3 {
		get(t, l.Config)
	}
	if wraps != 1 {
		t.Fatalf("WrapTransport applied %d times, want once per lease", wraps)
	}
	waitFor(t, "two connections open", func() bool { return open() == 2 })
	l.Release()
	waitFor(t, "the wrapped lease's connection closed", func() bool { return open() == 1 })
}

// The pool's lock is not held while a transport or a mapper is built: an
// API server whose transport takes long to build (its WrapTransport
// blocks here), or whose mapper does, holds up neither the members of
// other API servers nor a release. Of two transports built at once for
// one API server, one is kept and both leases use it.
func TestPoolBuildsOutsideItsLock(t *testing.T) {
	srv, _ := server(t)
	var p Pool
	const bound = 5 * time.Second
	within := func(what string, fn func()) {
		t.Helper()
		done := make(chan struct{})
		go func() {
			defer close(done)
			fn()
		}()
		select {
		case <-done:
		case <-time.After(bound):
			t.Fatalf("%s: not within %s while another API server's transport or mapper is being built", what, bound)
		}
	}
	others := func() {
		t.Helper()
		within("Acquire and Release of another API server", func() {
			l, err := p.Acquire(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
			if err != nil {
				t.Error(err)
				return
			}
			l.Release()
		})
	}

	// A transport being built, twice at once for the same API server.
	slow := &rest.Config{Host: "https://127.0.0.1:1", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	entered, release := make(chan struct{}, 2), make(chan struct{})
	slow.WrapTransport = func(next http.RoundTripper) http.RoundTripper {
		entered <- struct{}{}
		<-release
		return next
	}
	leases := make(chan *Lease, 2)
	for range 2 {
		go func() {
			l, err := p.Acquire(slow)
			if err != nil {
				t.Error(err)
			}
			leases <- l
		}()
	}
	for range 2 {
		select {
		case <-entered:
		case <-time.After(bound):
			t.Fatalf("two Acquires of one API server: the second did not start building within %s", bound)
		}
	}
	others()
	close(release)
	a, b := <-leases, <-leases
	if a == nil || b == nil {
		t.FailNow()
	}
	if a.Config.Transport != b.Config.Transport {
		t.Error("two leases of one API server built at once use different transports")
	}
	a.Release()
	b.Release()

	// A mapper being built.
	l, err := p.Acquire(slow)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	building, unblock, built := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(built)
		if _, err := l.MapperProvider(func(*rest.Config, *http.Client) (meta.RESTMapper, error) {
			close(building)
			<-unblock
			return meta.NewDefaultRESTMapper(nil), nil
		})(l.Config, &http.Client{}); err != nil {
			t.Error(err)
			close(building)
		}
	}()
	<-building
	defer func() { close(unblock); <-built }()
	others()

	p.mu.Lock()
	kept := len(p.entries)
	p.mu.Unlock()
	if kept != 1 {
		t.Errorf("%d transports kept with one lease held, want 1", kept)
	}
}

// A mapper shared by the leases of one identity sends its requests with
// the credentials of a lease still held: never those of a member that is
// gone, which may have been revoked since (as a member's own credentials
// are swapped in place, its client is what sends them here).
func TestPoolSharedMapperSendsHeldCredentials(t *testing.T) {
	var mu sync.Mutex
	var sent string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		sent = r.Header.Get("Authorization")
	}))
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, BearerToken: "shared"}
	var p Pool
	holder, err := p.Acquire(cfg) // keeps the API server's entry, uses no mapper
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()

	var shared *http.Client
	built := 0
	// member acquires a lease and builds its mapper with a client that
	// sends its own credentials, as a member's credential holder does.
	member := func(name string) *Lease {
		t.Helper()
		l, err := p.Acquire(cfg)
		if err != nil {
			t.Fatal(err)
		}
		mc := rest.CopyConfig(l.Config)
		mc.BearerToken = ""
		mc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				r = r.Clone(r.Context())
				r.Header.Set("Authorization", "Bearer "+name)
				return rt.RoundTrip(r)
			})
		})
		hc, err := rest.HTTPClientFor(mc)
		if err != nil {
			t.Fatal(err)
		}
		next := l.MapperProvider(func(_ *rest.Config, hc *http.Client) (meta.RESTMapper, error) {
			built++
			shared = hc
			return meta.NewDefaultRESTMapper(nil), nil
		})
		if _, err := next(mc, hc); err != nil {
			t.Fatal(err)
		}
		return l
	}
	sends := func(want string) {
		t.Helper()
		resp, err := shared.Get(srv.URL + "/api")
		if err != nil {
			t.Fatalf("the shared mapper's request: %v", err)
		}
		_ = resp.Body.Close()
		mu.Lock()
		defer mu.Unlock()
		if sent != "Bearer "+want {
			t.Errorf("the shared mapper's request sent %q, want the credentials of %s", sent, want)
		}
	}

	a := member("a")
	b := member("b")
	sends("b")
	b.Release()
	sends("a")
	a.Release()
	if resp, err := shared.Get(srv.URL + "/api"); !errors.Is(err, errNoLease) {
		if err == nil {
			_ = resp.Body.Close()
		}
		t.Errorf("with no lease of its identity held, the shared mapper's request = %v, want errNoLease", err)
	}
	c := member("c")
	defer c.Release()
	sends("c")
	if built != 1 {
		t.Errorf("built %d mappers for one identity, want 1", built)
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// identities is a Pool in front of a test server with a lease of the
// identity "stays" held, and leases of other identities (tokens) to come
// and go; built counts the mappers built.
type identities struct {
	t     *testing.T
	p     Pool
	base  *rest.Config
	stays *Lease
	built int
}

func newIdentities(t *testing.T) *identities {
	srv, _ := server(t)
	id := &identities{t: t, base: &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, BearerToken: "stays"}}
	id.stays, _ = id.p.Acquire(id.base)
	t.Cleanup(id.stays.Release)
	id.useMapper(id.stays)
	return id
}

// acquire leases the server with token's identity.
func (id *identities) acquire(token string) *Lease {
	cfg := rest.CopyConfig(id.base)
	cfg.BearerToken = token
	l, err := id.p.Acquire(cfg)
	if err != nil {
		id.t.Fatal(err)
	}
	return l
}

// useMapper asks for l's shared mapper, as a member's build does.
func (id *identities) useMapper(l *Lease) {
	id.t.Helper()
	if _, err := l.MapperProvider(func(*rest.Config, *http.Client) (meta.RESTMapper, error) {
		id.built++
		return meta.NewDefaultRESTMapper(nil), nil
	})(l.Config, &http.Client{}); err != nil {
		id.t.Fatal(err)
	}
}

// mappers counts the shared mappers of the server's transport.
func (id *identities) mappers() int {
	e := id.stays.e
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.mappers)
}

// kept reports whether the mapper of l's identity is still there.
func (id *identities) kept(l *Lease) bool {
	e := id.stays.e
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.mappers[l.ident]
	return ok
}

// TestPoolForgetsMappersOfIdentitiesGone: of the identities no lease holds
// any more, only the last few keep their shared mapper (for a member that
// comes back, as TestPoolSharedMapperSendsHeldCredentials's does), though
// the transport stays (another lease holds it): credentials that rotate,
// each rotation a new identity, leave no trail of mappers.
func TestPoolForgetsMappersOfIdentitiesGone(t *testing.T) {
	id := newIdentities(t)
	for i := range 20 {
		token := fmt.Sprintf("rotated-%d", i)
		a, b := id.acquire(token), id.acquire(token)
		id.useMapper(a)
		id.useMapper(b)
		a.Release()
		if n, want := id.mappers(), 2+min(i, maxIdleMappers); n != want {
			t.Fatalf("round %d: %d mappers while a lease of the rotated identity is still held, want %d", i, n, want)
		}
		b.Release()
		b.Release() // idempotent
	}
	if n := id.mappers(); n != 1+maxIdleMappers {
		t.Errorf("%d mappers after 20 identities came and went, want %d (the one still held and the last %d gone)", n, 1+maxIdleMappers, maxIdleMappers)
	}
	// The last identity to go finds its mapper again; the first one
	// gets a new one.
	for _, token := range []string{"rotated-19", "rotated-0"} {
		l := id.acquire(token)
		id.useMapper(l)
		l.Release()
	}
	if id.built != 22 {
		t.Errorf("built %d mappers, want 22 (one per identity, and rotated-0's again)", id.built)
	}
}

// TestPoolReleaseTwiceKeepsTheLastIdentities: a lease released a second
// time does not count as its identity going again: the identities kept
// are still the last to go.
func TestPoolReleaseTwiceKeepsTheLastIdentities(t *testing.T) {
	id := newIdentities(t)
	gone := make([]*Lease, 0, maxIdleMappers+1)
	for i := range maxIdleMappers + 1 {
		l := id.acquire(fmt.Sprintf("id-%d", i))
		id.useMapper(l)
		l.Release()
		gone = append(gone, l)
		gone[0].Release() // again, after each identity went
	}
	for i, l := range gone {
		if kept, want := id.kept(l), i > 0; kept != want {
			t.Errorf("id-%d's mapper kept: %v, want %v (the last %d identities to go keep theirs)", i, kept, want, maxIdleMappers)
		}
	}
}
