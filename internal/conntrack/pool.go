package conntrack

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/internal/leanmapper"
)

// Pool shares one transport, and so one set of connections, among the
// configs that reach the same API server with the same TLS settings, the
// way client-go's own transport cache does, but closes the connections
// once the last user releases them. Credentials sent as headers (tokens,
// basic auth, impersonation) stay per config.
//
// A hundred members pointed at three API servers then hold three HTTP/2
// connections instead of a hundred, and a deleted member leaves none
// behind.
//
// The pool's lock covers its map and reference counts only: transports
// and mappers are built outside it, so that thousands of members starting
// at once, each with an API server of its own, do not queue behind one
// another's TLS setup, nor a release behind them all.
type Pool struct {
	mu      sync.Mutex
	entries map[string]*entry
}

type entry struct {
	rt    http.RoundTripper
	conns *Tracker
	refs  int // under Pool.mu

	mu sync.Mutex
	// mappers holds one REST mapper per identity (credentials) using this
	// transport: the same API server seen by the same user maps kinds the
	// same way, so its members need to discover it only once.
	mappers map[string]*sharedMapper
	lefts   uint64 // counts the times a mapper's last lease left
}

// sharedMapper is the mapper of one identity, and the clients of the
// leases that use it. Its requests go out through the client of the last
// of them still held: never with the credentials of a member that is gone
// (deleted, or replaced by an Update), which may have been revoked since.
type sharedMapper struct {
	mapper meta.RESTMapper
	clients
	left uint64 // when its last lease left (entry.lefts), under entry.mu
}

// clients are the HTTP clients (their round trippers) of the leases that
// share a mapper, in the order they joined.
type clients struct {
	mu   sync.Mutex
	held []heldClient
}

type heldClient struct {
	lease *Lease
	rt    http.RoundTripper
}

// errNoLease is what a shared mapper's request gets once no lease of its
// identity is held.
var errNoLease = errors.New("no member reaches this API server with these credentials any more")

func (c *clients) join(l *Lease, rt http.RoundTripper) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = append(c.held, heldClient{l, rt})
}

// count is how many clients are held.
func (c *clients) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.held)
}

// leave takes l's client out; last says it was the last one held.
func (c *clients) leave(l *Lease) (last bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.held)
	c.held = slices.DeleteFunc(c.held, func(h heldClient) bool { return h.lease == l })
	return len(c.held) < n && len(c.held) == 0
}

// RoundTrip sends req through the client of the last lease that joined
// and is still held.
func (c *clients) RoundTrip(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	var rt http.RoundTripper
	if n := len(c.held); n > 0 {
		rt = c.held[n-1].rt
	}
	c.mu.Unlock()
	if rt == nil {
		return nil, fmt.Errorf("%s: %w", req.URL.Host, errNoLease)
	}
	return rt.RoundTrip(req)
}

// Lease is a config's use of the pool.
type Lease struct {
	// Config reaches the API server through the shared transport.
	Config  *rest.Config
	release func()
	// e and ident say which shared mapper the lease uses (nil e: none).
	e     *entry
	ident string
}

// MapperProvider builds a REST mapper (controller-runtime's
// cluster.Options.MapperProvider).
type MapperProvider = func(*rest.Config, *http.Client) (meta.RESTMapper, error)

// Release gives the lease back; the last release of a shared transport
// closes its connections. Release is idempotent.
func (l *Lease) Release() {
	if l.e != nil {
		l.e.leave(l)
	}
	l.release()
}

// MapperProvider returns a provider that hands every lease of the same API
// server and credentials one shared mapper, built by next the first time.
// The mapper's requests go out through the HTTP client given to the
// provider by the last lease still held that asked for it, with that
// lease's credentials of the moment; with none held, they fail.
// next defaults to leanmapper.New, which discovers only the group-versions
// asked about, where controller-runtime's dynamic mapper would read and
// keep the discovery of every group.
func (l *Lease) MapperProvider(next MapperProvider) MapperProvider {
	if next == nil {
		next = leanmapper.New
	}
	if l.e == nil {
		return next
	}
	return func(c *rest.Config, hc *http.Client) (meta.RESTMapper, error) {
		return l.e.mapperFor(l, next, c, hc)
	}
}

// Acquire leases the pool's transport for cfg's API server: the lease's
// Config is a copy of cfg that uses it. Release the lease once nothing uses
// that copy any more.
//
// Configs the pool cannot share (a custom Transport, an exec plugin, which
// may supply client certificates) get a Tracker of their own instead.
func (p *Pool) Acquire(cfg *rest.Config) (*Lease, error) {
	if cfg.Transport != nil || cfg.ExecProvider != nil {
		c, t := Wrap(cfg)
		var once sync.Once
		return &Lease{Config: c, release: func() { once.Do(t.Close) }}, nil
	}
	key, err := transportKey(cfg)
	if err != nil {
		return nil, err
	}
	ident, err := identityKey(cfg)
	if err != nil {
		return nil, err
	}
	e, err := p.ref(key, cfg)
	if err != nil {
		return nil, err
	}

	out := rest.CopyConfig(cfg)
	out.Transport = e.rt
	// TLS, proxy and dialing now belong to the shared transport; client-go
	// refuses a custom Transport together with TLS options.
	out.TLSClientConfig = rest.TLSClientConfig{}
	out.Proxy, out.Dial, out.WrapTransport = nil, nil, nil

	var once sync.Once
	return &Lease{Config: out, release: func() { once.Do(func() { p.release(key, e) }) }, e: e, ident: ident}, nil
}

// mapperFor returns the mapper that l's identity shares on e, built by next
// the first time, and has l's client (hc) carry its requests while l is
// held and the last to join.
func (e *entry) mapperFor(l *Lease, next MapperProvider, c *rest.Config, hc *http.Client) (meta.RESTMapper, error) {
	if hc == nil {
		return nil, errors.New("conntrack: a shared mapper needs the lease's HTTP client")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	sm, ok := e.mappers[l.ident]
	if !ok {
		sm = &sharedMapper{}
		e.mappers[l.ident] = sm
	}
	sm.join(l, hc.Transport)
	if sm.mapper != nil {
		return sm.mapper, nil
	}
	m, err := next(c, &http.Client{Transport: &sm.clients, Timeout: hc.Timeout, Jar: hc.Jar})
	if err == nil {
		sm.mapper = m
	}
	return m, err
}

// leave takes l's client out of the shared mapper of its identity.
func (e *entry) leave(l *Lease) {
	e.mu.Lock()
	defer e.mu.Unlock()
	sm := e.mappers[l.ident]
	if sm == nil || !sm.leave(l) {
		return // l was not held (a second Release), or others still are
	}
	// No lease holds the identity's mapper any more. It stays for a
	// member that comes back with the same credentials (a restart), but
	// only the last few identities to go keep theirs: credentials that
	// rotate would otherwise leave a mapper behind at every rotation for
	// as long as another lease keeps the transport. One never built (its
	// provider failed) goes at once.
	if sm.mapper == nil {
		delete(e.mappers, l.ident)
		return
	}
	e.lefts++
	sm.left = e.lefts
	var idle []string
	for ident, m := range e.mappers {
		if m.count() == 0 {
			idle = append(idle, ident)
		}
	}
	if len(idle) <= maxIdleMappers {
		return
	}
	slices.SortFunc(idle, func(a, b string) int { return cmp.Compare(e.mappers[a].left, e.mappers[b].left) })
	for _, ident := range idle[:len(idle)-maxIdleMappers] {
		delete(e.mappers, ident)
	}
}

// maxIdleMappers is how many mappers of identities no lease holds any
// more an API server's entry keeps.
const maxIdleMappers = 4

// ref takes a reference to the entry for key, building it for cfg when
// there is none. The transport is built with the lock released; of two
// built at once for one key, the second is closed unused.
func (p *Pool) ref(key string, cfg *rest.Config) (*entry, error) {
	p.mu.Lock()
	if e, ok := p.entries[key]; ok {
		e.refs++
		p.mu.Unlock()
		return e, nil
	}
	p.mu.Unlock()

	shared, conns := Wrap(&rest.Config{
		Host:               cfg.Host,
		TLSClientConfig:    cfg.TLSClientConfig,
		Proxy:              cfg.Proxy,
		Dial:               cfg.Dial,
		DisableCompression: cfg.DisableCompression,
		// Applied once, to the tracked transport: a WrapTransport that
		// replaces the transport it is given (KubeFed's relaxed TLS
		// does) then builds one replacement per lease, not one per
		// client, and dials through the tracker.
		WrapTransport: cfg.WrapTransport,
	})
	rt, err := rest.TransportFor(shared)
	if err != nil {
		conns.Close()
		return nil, fmt.Errorf("building transport for %s: %w", cfg.Host, err)
	}
	built := &entry{rt: rt, conns: conns, mappers: map[string]*sharedMapper{}}

	p.mu.Lock()
	e, ok := p.entries[key]
	if !ok {
		e = built
		if p.entries == nil {
			p.entries = map[string]*entry{}
		}
		p.entries[key] = e
	}
	e.refs++
	p.mu.Unlock()
	if e != built {
		conns.Close() // nothing dialed through it yet
	}
	return e, nil
}

func (p *Pool) release(key string, e *entry) {
	p.mu.Lock()
	e.refs--
	last := e.refs == 0
	if last && p.entries[key] == e {
		delete(p.entries, key)
	}
	p.mu.Unlock()
	if last {
		e.conns.Close()
	}
}

// identityKey identifies who a config authenticates as beyond its TLS
// client certificate (which transportKey covers).
func identityKey(cfg *rest.Config) (string, error) {
	// Hashed, never stored or printed.
	raw, err := json.Marshal(struct { //nolint:gosec // G117: only hashed
		Username, Password, BearerToken, BearerTokenFile string
		Impersonate                                      rest.ImpersonationConfig
		AuthProvider                                     any
	}{cfg.Username, cfg.Password, cfg.BearerToken, cfg.BearerTokenFile, cfg.Impersonate, cfg.AuthProvider})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:]), nil
}

// transportKey identifies what a shared transport depends on: the server
// and everything about TLS, proxying, dialing and wrapping.
func transportKey(cfg *rest.Config) (string, error) {
	t := cfg.TLSClientConfig
	if cfg.Dial != nil || cfg.Proxy != nil || cfg.WrapTransport != nil {
		// Funcs cannot be compared; identity of the config is the safe key.
		return fmt.Sprintf("%p", cfg), nil
	}
	raw, err := json.Marshal(struct {
		Host                                  string
		Insecure                              bool
		ServerName, CertFile, KeyFile, CAFile string
		CertData, KeyData, CAData             []byte
		NextProtos                            []string
		DisableCompression                    bool
	}{cfg.Host, t.Insecure, t.ServerName, t.CertFile, t.KeyFile, t.CAFile, t.CertData, t.KeyData, t.CAData, t.NextProtos, cfg.DisableCompression})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:]), nil
}
