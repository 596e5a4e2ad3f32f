package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// ErrFaultProxyClosed is returned by a FaultProxy's mode changes once it is
// closed.
var ErrFaultProxyClosed = errors.New("test: fault proxy closed")

// A FaultProxy is a loopback TCP proxy in front of one API server that
// breaks the control plane on demand, the way networks and API servers
// break in production: a partition that hangs every call (Freeze), an API
// server that is down (Refuse), a write applied whose answer never comes
// back (LoseAnswers), a slow link (SetLatency). Point a controller at
// Config instead of the API server's own config, let it work, switch a
// fault on, and check what it did. A fault applies at once to the open
// connections and to every new one, until the next mode change. Its
// methods may be called from any goroutine; mode changes made at once
// apply one after the other.
//
// Bytes pass through untouched, TLS included: the client verifies the API
// server's own certificate (Config keeps the server's name for that) and
// presents its own credentials. The proxy runs in the process of the test,
// so a test owns its faults without a helper process; Close stops every
// goroutine it started, so a leak check after Close sees none of them.
type FaultProxy struct {
	target string // the API server's host:port
	addr   string // the proxy's 127.0.0.1:port
	cfg    *rest.Config

	// modeMu serializes the mode changes, listening again included, so
	// that two of them leaving Refuse at once do not both listen.
	modeMu sync.Mutex

	mu       sync.Mutex
	ln       net.Listener // nil while refusing, or once closed
	mode     faultMode
	latency  time.Duration
	changed  chan struct{} // closed and replaced on every change of mode or latency
	conns    map[*proxyConn]struct{}
	accepted int
	closed   bool

	toServer, toClient, lost atomic.Int64

	wg sync.WaitGroup // the accept loop and every connection
}

type faultMode int

const (
	modePass faultMode = iota
	modeFreeze
	modeRefuse
	modeLoseAnswers
)

func (m faultMode) String() string {
	return [...]string{"pass", "freeze", "refuse", "lose answers"}[m]
}

const (
	// lostAnswerCut is how long a connection whose answers are being lost
	// lives after the first lost byte. The requests sent meanwhile still
	// reach the API server and are applied; then the connection ends, as
	// one whose peer vanished does, and the client learns only that the
	// outcome of its calls is unknown. (Once bytes of a TLS stream are
	// lost, nothing later on that connection can be read anyway.)
	lostAnswerCut = 200 * time.Millisecond
	// faultDialTimeout bounds the proxy's dial of the API server.
	faultDialTimeout = 10 * time.Second
	// relistenFor bounds how long leaving Refuse tries to listen on the
	// proxy's port again.
	relistenFor = 5 * time.Second
	// chunkSize is the most one read takes from a connection.
	chunkSize = 32 << 10
	// queuedChunks is how many chunks a direction holds while frozen or
	// delayed before it stops reading, and TCP's flow control makes the
	// sender wait.
	queuedChunks = 64
)

// StartFaultProxy starts a proxy, passing everything, in front of the API
// server target reaches. Close it when done (NewFaultProxy does, in a
// test).
func StartFaultProxy(target *rest.Config) (*FaultProxy, error) {
	u, _, err := rest.DefaultServerUrlFor(target)
	if err != nil {
		return nil, fmt.Errorf("test: fault proxy: reading the API server's address: %w", err)
	}
	backend := u.Host
	if u.Port() == "" {
		port := "443"
		if u.Scheme == "http" {
			port = "80"
		}
		backend = net.JoinHostPort(u.Hostname(), port)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("test: fault proxy for %s: %w", backend, err)
	}
	p := &FaultProxy{
		target:  backend,
		addr:    ln.Addr().String(),
		ln:      ln,
		changed: make(chan struct{}),
		conns:   map[*proxyConn]struct{}{},
	}
	cfg := rest.CopyConfig(target)
	// The client still checks the certificate against the API server's
	// name, not the proxy's address.
	if cfg.ServerName == "" && u.Scheme == "https" {
		cfg.ServerName = u.Hostname()
	}
	u.Host = p.addr
	if u.Path == "/" {
		u.Path = "" // as the target wrote it
	}
	cfg.Host = u.String()
	p.cfg = cfg
	p.wg.Add(1)
	go p.accept(ln)
	return p, nil
}

// NewFaultProxy is StartFaultProxy for tests: it fails tb on error and
// closes the proxy when the test ends.
func NewFaultProxy(tb testing.TB, target *rest.Config) *FaultProxy {
	tb.Helper()
	p, err := StartFaultProxy(target)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := p.Close(); err != nil {
			tb.Errorf("closing the fault proxy: %v", err)
		}
	})
	return p
}

// Config returns a copy of the target config that reaches the API server
// through the proxy. Each call returns a new copy. Its clients speak what
// the target's would: HTTP/2 to an API server over TLS, as client-go does
// by default. HTTP1Config is the same limited to HTTP/1.1, for LoseAnswers
// on large writes.
func (p *FaultProxy) Config() *rest.Config { return rest.CopyConfig(p.cfg) }

// HTTP1Config is Config with HTTP/1.1 as the only protocol its clients
// offer the API server (TLSClientConfig.NextProtos), unless the target
// config brings a Transport of its own, which ignores that. Under
// LoseAnswers, a write through it reaches the API server whatever its
// size; over HTTP/2 a write larger than the API server's flow-control
// window does not (see LoseAnswers). Each call returns a new copy.
func (p *FaultProxy) HTTP1Config() *rest.Config {
	cfg := p.Config()
	cfg.NextProtos = []string{"http/1.1"}
	return cfg
}

// Address is the proxy's host:port on 127.0.0.1.
func (p *FaultProxy) Address() string { return p.addr }

// Pass forwards bytes again. Connections that were frozen resume, and the
// bytes held meanwhile are delivered in order, as TCP delivers them once a
// short partition heals; call Cut first to end them instead, as a
// partition longer than the client's health checks or TCP's retries ends
// them. After Refuse, the proxy listens on its port again; the error says
// when it cannot (another socket took the port meanwhile).
func (p *FaultProxy) Pass() error { return p.setMode(modePass) }

// Freeze partitions the client from the API server: connections open and
// new ones are accepted, but no byte goes through either way, and nothing
// is closed, so every call hangs until its own timeout. Bytes sent
// meanwhile are held (up to a bound, then TCP's flow control stalls the
// sender) and delivered if Pass follows. A side that closes or resets its
// connection meanwhile is held the same way: the other side learns of it
// only after Pass, once the bytes sent before have been delivered. A
// frozen new connection does not reach the API server at all. Cut and
// Close still reset frozen connections at once.
func (p *FaultProxy) Freeze() error { return p.setMode(modeFreeze) }

// Refuse makes the API server look down: open connections are reset and
// new ones refused (the proxy stops listening), so calls fail at once with
// "connection refused" or "connection reset by peer".
func (p *FaultProxy) Refuse() {
	// Entering Refuse listens on nothing, so it cannot fail.
	_ = p.setMode(modeRefuse)
}

// LoseAnswers lets requests reach the API server, which applies them, and
// loses its answers: bytes from the API server are dropped, and a
// connection that lost some ends shortly after (some 200ms), the way a
// connection whose peer vanished mid-answer does. A write made then has
// happened, but its caller sees only an error: the case a controller must
// resolve by reading, not by retrying blindly. A connection opened in this
// mode loses the API server's half of its TLS handshake and fails before
// any request is sent; the fault hits connections already open, which is
// where a client sends its calls.
//
// Over HTTP/2, which a client of Config speaks, that holds only for a
// request whose body fits in the API server's flow-control window for one
// stream (256 KiB for kube-apiserver): the client sends the rest of a
// larger body only once the API server's window updates reach it, and the
// proxy loses them with the answers (under TLS it cannot tell them
// apart). The API server then gets part of the request and applies
// nothing, and the call fails when the connection ends. Over HTTP/1.1 the
// API server needs nothing from its side to read a whole request: give
// the client HTTP1Config to lose the answers of writes of any size.
func (p *FaultProxy) LoseAnswers() error { return p.setMode(modeLoseAnswers) }

// SetLatency delays every chunk of bytes, in both directions, by d from
// the moment the proxy read it; order is kept, and a request and its
// answer each take d more. Zero removes the delay. It applies with any
// mode, to the open connections too.
func (p *FaultProxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = max(d, 0)
	p.notifyLocked()
}

// Cut resets every open connection, whatever the mode; clients reconnect
// through the proxy in its current mode.
func (p *FaultProxy) Cut() {
	p.mu.Lock()
	conns := p.connsLocked()
	p.mu.Unlock()
	for _, c := range conns {
		c.cut()
	}
}

// FaultStats counts a FaultProxy's traffic since it started.
type FaultStats struct {
	// Accepted counts the client connections accepted.
	Accepted int
	// Open counts the client connections open now.
	Open int
	// ToServer and ToClient count the bytes delivered each way.
	ToServer, ToClient int64
	// Lost counts the bytes of the API server's answers LoseAnswers
	// dropped.
	Lost int64
}

// Stats returns the proxy's counters.
func (p *FaultProxy) Stats() FaultStats {
	p.mu.Lock()
	accepted, open := p.accepted, len(p.conns)
	p.mu.Unlock()
	return FaultStats{
		Accepted: accepted,
		Open:     open,
		ToServer: p.toServer.Load(),
		ToClient: p.toClient.Load(),
		Lost:     p.lost.Load(),
	}
}

// Close stops listening, resets every connection and returns once every
// goroutine of the proxy has ended. It is safe to call more than once.
func (p *FaultProxy) Close() error {
	p.mu.Lock()
	p.closed = true
	ln := p.ln
	p.ln = nil
	conns := p.connsLocked()
	p.notifyLocked()
	p.mu.Unlock()
	var err error
	if ln != nil {
		if cerr := ln.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
			err = fmt.Errorf("test: fault proxy %s: %w", p.addr, cerr)
		}
	}
	for _, c := range conns {
		c.cut()
	}
	p.wg.Wait()
	return err
}

func (p *FaultProxy) setMode(m faultMode) error {
	p.modeMu.Lock()
	defer p.modeMu.Unlock()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrFaultProxyClosed, p.addr)
	}
	p.mode = m
	p.notifyLocked()
	var (
		ln    net.Listener
		conns []*proxyConn
	)
	if m == modeRefuse {
		ln, p.ln = p.ln, nil
		conns = p.connsLocked()
	}
	listen := p.ln == nil && m != modeRefuse
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for _, c := range conns {
		c.cut()
	}
	if listen {
		return p.relisten(m)
	}
	return nil
}

// relisten listens on the proxy's port again after Refuse. The port was
// free for a while, so another socket may hold it for a moment (an
// outgoing connection's local port): it tries for a few seconds.
func (p *FaultProxy) relisten(m faultMode) error {
	deadline := time.Now().Add(relistenFor)
	for {
		ln, err := net.Listen("tcp", p.addr)
		if err == nil {
			p.mu.Lock()
			if p.closed {
				// Closed meanwhile.
				p.mu.Unlock()
				_ = ln.Close()
				return nil
			}
			p.ln = ln
			p.wg.Add(1)
			p.mu.Unlock()
			go p.accept(ln)
			return nil
		}
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("test: fault proxy %s: listening again to %s: %w", p.addr, m, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// notifyLocked wakes every connection waiting on the mode or the latency.
func (p *FaultProxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// state returns what a connection needs to know to move a chunk.
func (p *FaultProxy) state() (faultMode, time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.latency, p.changed
}

func (p *FaultProxy) connsLocked() []*proxyConn {
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	return conns
}

func (p *FaultProxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors, say: try again shortly.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.adopt(nc)
	}
}

// adopt starts forwarding a new client connection, unless the proxy
// refuses or is closed by now.
func (p *FaultProxy) adopt(nc net.Conn) {
	p.mu.Lock()
	if p.closed || p.mode == modeRefuse {
		p.mu.Unlock()
		reset(nc)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &proxyConn{p: p, client: nc, ctx: ctx, cancel: cancel}
	p.conns[c] = struct{}{}
	p.accepted++
	p.wg.Add(1)
	p.mu.Unlock()
	go c.run()
}

// proxyConn is one client connection and, once dialed, its connection to
// the API server. Each direction is a reader, which stamps every chunk
// with the time it read it, and a sender, which delivers chunks in order
// once their delay has passed and the mode lets them through.
type proxyConn struct {
	p      *FaultProxy
	client net.Conn
	ctx    context.Context // ends when the connection is cut
	cancel context.CancelFunc

	mu      sync.Mutex
	backend net.Conn

	wg sync.WaitGroup // readers and senders
}

// chunk is what a reader read: bytes, or how its side ended (an orderly
// end, or a reset or other error).
type chunk struct {
	data  []byte
	at    time.Time
	eof   bool
	reset bool
}

// direction is a sender's side of the proxy.
type direction int

const (
	toServer direction = iota
	toClient
)

func (c *proxyConn) run() {
	defer c.p.wg.Done()
	up := make(chan chunk, queuedChunks)
	c.wg.Go(func() { c.read(c.client, up) })
	c.send(toServer, up)
	c.wg.Wait()
	c.cancel()
	c.mu.Lock()
	backend := c.backend
	c.mu.Unlock()
	_ = c.client.Close()
	if backend != nil {
		_ = backend.Close()
	}
	c.p.mu.Lock()
	delete(c.p.conns, c)
	c.p.mu.Unlock()
}

// cut resets both sides of the connection; the goroutines serving it end.
func (c *proxyConn) cut() {
	c.cancel()
	c.mu.Lock()
	backend := c.backend
	c.mu.Unlock()
	reset(c.client)
	if backend != nil {
		reset(backend)
	}
}

// reset closes nc so that its peer gets a reset rather than an orderly end,
// as from a peer that vanished.
func reset(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = nc.Close()
}

// dial connects to the API server and starts the other direction. It
// happens on the first bytes the client sends that may pass, so that a
// connection frozen from the start never reaches the API server.
func (c *proxyConn) dial() (net.Conn, error) {
	d := net.Dialer{Timeout: faultDialTimeout}
	backend, err := d.DialContext(c.ctx, "tcp", c.p.target)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.ctx.Err() != nil {
		c.mu.Unlock()
		reset(backend)
		return nil, c.ctx.Err()
	}
	c.backend = backend
	c.mu.Unlock()
	down := make(chan chunk, queuedChunks)
	c.wg.Go(func() { c.read(backend, down) })
	c.wg.Go(func() { c.send(toClient, down) })
	return backend, nil
}

// read reads src into chunks until it ends. An orderly end is passed on
// as an eof chunk, a reset (or any other error) as a reset chunk, in order
// after the bytes, so that a frozen connection hides it too.
func (c *proxyConn) read(src net.Conn, out chan<- chunk) {
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			ch := chunk{data: append([]byte(nil), buf[:n]...), at: time.Now()}
			select {
			case out <- ch:
			case <-c.ctx.Done():
				return
			}
		}
		if err == nil {
			continue
		}
		if c.ctx.Err() != nil {
			return // cut: the error is the proxy's own doing
		}
		end := chunk{eof: errors.Is(err, io.EOF), at: time.Now()}
		end.reset = !end.eof
		select {
		case out <- end:
		case <-c.ctx.Done():
		}
		return
	}
}

// send delivers the chunks of one direction, and a reset of one side as a
// reset of the other, when it comes due. Toward the client, in
// LoseAnswers, it drops the bytes instead and cuts the connection a little
// later; once a byte is lost, every later one is too.
func (c *proxyConn) send(dir direction, in <-chan chunk) {
	var (
		dst    net.Conn
		losing *time.Timer
		cutAt  <-chan time.Time
	)
	if dir == toClient {
		dst = c.client
	}
	defer func() {
		if losing != nil {
			losing.Stop()
		}
	}()
	for {
		var ch chunk
		select {
		case ch = <-in:
		case <-cutAt:
			c.cut()
			return
		case <-c.ctx.Done():
			return
		}
		mode, ok := c.hold(ch, cutAt)
		if !ok {
			return
		}
		if ch.reset {
			c.cut()
			return
		}
		if dir == toClient && (mode == modeLoseAnswers || losing != nil) {
			c.p.lost.Add(int64(len(ch.data)))
			if losing == nil {
				losing = time.NewTimer(lostAnswerCut)
				cutAt = losing.C
			}
			continue
		}
		if dst == nil {
			if ch.eof {
				// The client left before sending a byte.
				c.cut()
				return
			}
			var err error
			if dst, err = c.dial(); err != nil {
				c.cut()
				return
			}
		}
		if ch.eof {
			// Pass the half-close on; the other direction goes on.
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
			return
		}
		if _, err := dst.Write(ch.data); err != nil {
			c.cut()
			return
		}
		if dir == toServer {
			c.p.toServer.Add(int64(len(ch.data)))
		} else {
			c.p.toClient.Add(int64(len(ch.data)))
		}
	}
}

// hold waits until ch is due (its read time plus the latency) and the
// proxy is not frozen, and returns the mode then. It reports false if the
// connection is cut meanwhile.
func (c *proxyConn) hold(ch chunk, cutAt <-chan time.Time) (faultMode, bool) {
	for {
		mode, latency, changed := c.p.state()
		var due <-chan time.Time
		var t *time.Timer
		if mode != modeFreeze {
			wait := time.Until(ch.at.Add(latency))
			if wait <= 0 {
				return mode, true
			}
			t = time.NewTimer(wait)
			due = t.C
		}
		select {
		case <-due:
		case <-changed:
		case <-cutAt:
			c.cut()
		case <-c.ctx.Done():
		}
		if t != nil {
			t.Stop()
		}
		if c.ctx.Err() != nil {
			return mode, false
		}
	}
}
