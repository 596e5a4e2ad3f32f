package test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The forwarder gives endpoints (endpoints.go) their loopback addresses: a
// helper process that listens on 127.0.0.1, one port per endpoint, and
// copies the bytes of every connection it accepts to and from the API
// server behind it. TLS passes through untouched, so a client verifies
// the API server's own certificate (envtest issues it for localhost and
// 127.0.0.1) and presents its own credentials.
//
// It runs in a process of its own so that its listeners, connections and
// goroutines do not count against the process a test measures. That
// process is the running executable again, started under the name
// forwarderArg0: this package's init sees the name, serves, and never gets
// to main. It reads one command a line on stdin and answers one line on
// stdout:
//
//	listen <host:port>  → ok <127.0.0.1:port>   forward a new port to host:port
//	close <addr>        → ok                    close the port and its connections
//	stats <addr>        → ok <accepted> <open>  client connections of the port
//
// or "error <reason>". It exits when its stdin closes (the fleet stopped,
// or the process that started it died), and on Linux also when that
// process dies (the parent-death signal).
const (
	forwarderArg0 = "mccr-test-forwarder"
	forwarderEnv  = "MCCR_TEST_FORWARDER" // the pid of the process it serves
)

func init() {
	if filepath.Base(os.Args[0]) != forwarderArg0 {
		return
	}
	parent, err := strconv.Atoi(os.Getenv(forwarderEnv))
	if err != nil {
		return // a binary of that name, but not started by a fleet
	}
	// The parent may have died before the parent-death signal was armed.
	if os.Getppid() != parent {
		os.Exit(1)
	}
	serveForwarder(os.Stdin, os.Stdout)
	os.Exit(0)
}

// acceptPauseMax bounds the pause of a port's accept loop after an error.
const acceptPauseMax = time.Second

// backendDialTimeout bounds the forwarder's dial of an API server; a
// client's connection that cannot be forwarded is closed.
const backendDialTimeout = 10 * time.Second

// serveForwarder answers commands from in on out until in ends, then
// closes every port and connection.
func serveForwarder(in io.Reader, out io.Writer) {
	ports := map[string]*port{}
	defer func() {
		for _, p := range ports {
			p.close()
		}
	}()
	sc := bufio.NewScanner(in)
	w := bufio.NewWriter(out)
	for sc.Scan() {
		reply := handleCommand(ports, strings.Fields(sc.Text()))
		if _, err := fmt.Fprintln(w, reply); err != nil {
			return
		}
		if err := w.Flush(); err != nil {
			return
		}
	}
}

func handleCommand(ports map[string]*port, f []string) string {
	if len(f) != 2 {
		return fmt.Sprintf("error malformed command %q", strings.Join(f, " "))
	}
	if f[0] == "listen" {
		p, err := listenPort(f[1])
		if err != nil {
			return "error " + err.Error()
		}
		ports[p.addr] = p
		return "ok " + p.addr
	}
	p, ok := ports[f[1]]
	if !ok {
		return "error no port " + f[1]
	}
	switch f[0] {
	case "close":
		delete(ports, f[1])
		p.close()
		return "ok"
	case "stats":
		accepted, open := p.stats()
		return fmt.Sprintf("ok %d %d", accepted, open)
	}
	return "error unknown command " + f[0]
}

// port is one endpoint's listener and the connections it forwards.
type port struct {
	addr    string
	backend string
	ln      net.Listener

	mu       sync.Mutex
	conns    map[net.Conn]struct{} // clients' and the backend's
	clients  int                   // open client connections
	accepted int
	closed   bool
}

func listenPort(backend string) (*port, error) {
	if _, _, err := net.SplitHostPort(backend); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &port{addr: ln.Addr().String(), backend: backend, ln: ln, conns: map[net.Conn]struct{}{}}
	go p.accept()
	return p, nil
}

// accept serves the port's connections until its listener is closed. On
// any other error (out of file descriptors, say) it tries again after a
// pause that doubles up to a second, as net/http's Server does.
func (p *port) accept() {
	var pause time.Duration
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			pause = min(max(2*pause, 5*time.Millisecond), acceptPauseMax)
			time.Sleep(pause)
			continue
		}
		pause = 0
		if !p.track(c, true) {
			return
		}
		go p.forward(c)
	}
}

// track records an open connection, or closes it if the port is closed.
func (p *port) track(c net.Conn, client bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	if client {
		p.accepted++
		p.clients++
	}
	return true
}

func (p *port) untrack(c net.Conn, client bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.conns[c]; !ok {
		return
	}
	delete(p.conns, c)
	if client {
		p.clients--
	}
}

// forward copies bytes both ways between the client and a new connection
// to the backend. A side that ends cleanly is passed on as a half-close;
// an error on either side closes both.
func (p *port) forward(client net.Conn) {
	defer p.untrack(client, true)
	defer func() { _ = client.Close() }()
	backend, err := net.DialTimeout("tcp", p.backend, backendDialTimeout)
	if err != nil {
		return
	}
	if !p.track(backend, false) {
		return
	}
	defer p.untrack(backend, false)
	defer func() { _ = backend.Close() }()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipe(backend, client)
	}()
	pipe(client, backend)
	<-done
}

// pipe copies from src to dst until src ends.
func pipe(dst, src net.Conn) {
	if _, err := io.Copy(dst, src); err != nil {
		_ = dst.Close()
		_ = src.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

func (p *port) stats() (accepted, open int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted, p.clients
}

func (p *port) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.clients = 0
	p.mu.Unlock()
	_ = p.ln.Close()
	for c := range conns {
		_ = c.Close()
	}
}

// forwarder is the fleet's handle on its helper process.
type forwarder struct {
	mu  sync.Mutex
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	err error // set once the process is stopped or broken
}

// errForwarderStopped is what a forwarder answers once stopped.
var errForwarderStopped = errors.New("test: endpoint forwarder stopped")

// startForwarder starts the helper process.
func startForwarder() (*forwarder, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("test: endpoint forwarder: finding this executable: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Args = []string{forwarderArg0}
	// Built with -race (as tests are), the helper would sleep a second
	// on its way out.
	race := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), forwarderEnv+"="+strconv.Itoa(os.Getpid()), "GORACE="+race)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = dieWithParent()
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("test: starting the endpoint forwarder: %w", err)
	}
	return &forwarder{cmd: cmd, in: in, out: bufio.NewReader(out)}, nil
}

// call sends one command and returns the fields of its answer after "ok".
func (f *forwarder) call(command string, arg string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	line, err := f.roundTrip(command + " " + arg + "\n")
	if err != nil {
		f.err = fmt.Errorf("test: endpoint forwarder: %w", err)
		return nil, f.err
	}
	fields := strings.Fields(line)
	switch {
	case len(fields) > 0 && fields[0] == "ok":
		return fields[1:], nil
	case strings.HasPrefix(line, "error "):
		return nil, fmt.Errorf("test: endpoint forwarder: %s %s: %s", command, arg, strings.TrimPrefix(line, "error "))
	}
	f.err = fmt.Errorf("test: endpoint forwarder: unexpected answer %q", line)
	return nil, f.err
}

func (f *forwarder) roundTrip(command string) (string, error) {
	if _, err := io.WriteString(f.in, command); err != nil {
		return "", err
	}
	line, err := f.out.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(line, "\n"), nil
}

// listen opens a new port forwarding to backend (host:port) and returns
// its address.
func (f *forwarder) listen(backend string) (string, error) {
	r, err := f.call("listen", backend)
	if err != nil {
		return "", err
	}
	if len(r) != 1 {
		return "", fmt.Errorf("test: endpoint forwarder: listen answered %q", r)
	}
	return r[0], nil
}

// close closes the port at addr and its connections.
func (f *forwarder) close(addr string) error {
	_, err := f.call("close", addr)
	return err
}

// stats returns how many client connections the port at addr accepted,
// and how many are open.
func (f *forwarder) stats(addr string) (accepted, open int, err error) {
	r, err := f.call("stats", addr)
	if err != nil {
		return 0, 0, err
	}
	if len(r) == 2 {
		accepted, err1 := strconv.Atoi(r[0])
		open, err2 := strconv.Atoi(r[1])
		if err1 == nil && err2 == nil {
			return accepted, open, nil
		}
	}
	return 0, 0, fmt.Errorf("test: endpoint forwarder: stats answered %q", r)
}

// stopWait bounds how long stop waits for the helper to exit before it
// kills it.
const stopWait = 10 * time.Second

// stop closes the helper's stdin, which closes every port and connection,
// and waits for it to exit. It is safe to call more than once.
func (f *forwarder) stop() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if errors.Is(f.err, errForwarderStopped) {
		return nil
	}
	f.err = errForwarderStopped
	_ = f.in.Close()
	done := make(chan error, 1)
	go func() { done <- f.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("test: endpoint forwarder: %w", err)
		}
		return nil
	case <-time.After(stopWait):
		_ = f.cmd.Process.Kill()
		return fmt.Errorf("test: endpoint forwarder did not exit within %s of its stdin closing: %w", stopWait, <-done)
	}
}

// pid is the helper's process id.
func (f *forwarder) pid() int { return f.cmd.Process.Pid }
