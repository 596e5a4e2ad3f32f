package test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// echoServer accepts connections on loopback and writes back every line it
// reads, until the client half-closes; then it says "bye" and closes.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_, _ = io.Copy(c, c)
				_, _ = io.WriteString(c, "bye\n")
			}()
		}
	}()
	return ln.Addr().String()
}

func newTestForwarder(t *testing.T) *forwarder {
	t.Helper()
	fw, err := startForwarder()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fw.stop(); err != nil {
			t.Error(err)
		}
	})
	return fw
}

func TestForwarderCopiesBothWaysAndPassesHalfClose(t *testing.T) {
	fw := newTestForwarder(t)
	backend := echoServer(t)
	addrs := map[string]bool{}
	for range 3 {
		addr, err := fw.listen(backend)
		if err != nil {
			t.Fatal(err)
		}
		if addrs[addr] || !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Fatalf("listen gave %s (had %v): want a new port on 127.0.0.1", addr, addrs)
		}
		addrs[addr] = true
	}
	for addr := range addrs {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		if _, err := io.WriteString(c, "hello "+addr+"\n"); err != nil {
			t.Fatal(err)
		}
		if line, err := r.ReadString('\n'); err != nil || line != "hello "+addr+"\n" {
			t.Fatalf("echo through %s: %q, %v", addr, line, err)
		}
		accepted, open, err := fw.stats(addr)
		if err != nil || accepted != 1 || open != 1 {
			t.Fatalf("stats(%s) = %d accepted, %d open, %v; want 1, 1", addr, accepted, open, err)
		}
		// The client's half-close reaches the backend, whose last words
		// come back.
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if rest, err := io.ReadAll(r); err != nil || string(rest) != "bye\n" {
			t.Fatalf("after half-close through %s: %q, %v", addr, rest, err)
		}
		_ = c.Close()
		Eventually(t, 10*time.Second, "the connection through "+addr+" closed", func() bool {
			accepted, open, err := fw.stats(addr)
			return err == nil && accepted == 1 && open == 0
		})
	}
}

// connect opens a port in front of backend and a connection to it.
func connect(t *testing.T, fw *forwarder, backend string) (addr string, c net.Conn) {
	t.Helper()
	addr, err := fw.listen(backend)
	if err != nil {
		t.Fatal(err)
	}
	c, err = net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return addr, c
}

// wantClosed fails t unless the forwarder closes c.
func wantClosed(t *testing.T, c net.Conn, when string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %s: %v, want the connection closed", when, err)
	}
}

func TestForwarderCloseEndsConnectionsAndPort(t *testing.T) {
	fw := newTestForwarder(t)
	addr, c := connect(t, fw, echoServer(t))
	if _, err := io.WriteString(c, "x\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := fw.close(addr); err != nil {
		t.Fatal(err)
	}
	wantClosed(t, c, "after close")
	if _, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial after close: %v, want connection refused", err)
	}
	if _, _, err := fw.stats(addr); err == nil {
		t.Fatal("stats of a closed port succeeded")
	}
}

func TestForwarderClosesClientsOfAnUnreachableBackend(t *testing.T) {
	fw := newTestForwarder(t)
	gone, err := Unreachable("gone")
	if err != nil {
		t.Fatal(err)
	}
	_, c := connect(t, fw, strings.TrimPrefix(gone.Config.Host, "https://"))
	wantClosed(t, c, "from a port whose backend is gone")
}

func TestForwarderRefusesBadCommandsAndStops(t *testing.T) {
	fw, err := startForwarder()
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][2]string{{"listen", "no-port"}, {"close", "127.0.0.1:1"}, {"stats", "nowhere"}, {"dance", "x"}} {
		if _, err := fw.call(bad[0], bad[1]); err == nil {
			t.Errorf("%s %s: no error", bad[0], bad[1])
		}
	}
	// Errors it answers leave it usable.
	if _, err := fw.listen(echoServer(t)); err != nil {
		t.Fatal(err)
	}
	pid := fw.pid()
	if err := fw.stop(); err != nil {
		t.Fatal(err)
	}
	if err := fw.stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("forwarder process %d after stop: %v, want it gone", pid, err)
	}
	if _, err := fw.listen("127.0.0.1:1"); !errors.Is(err, errForwarderStopped) {
		t.Fatalf("listen after stop: %v, want errForwarderStopped", err)
	}
}

// flakyListener fails its first Accepts as a process out of file
// descriptors does.
type flakyListener struct {
	net.Listener
	fails atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

func TestForwarderPortAcceptsAgainAfterAnError(t *testing.T) {
	backend := echoServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{Listener: ln}
	fl.fails.Store(3)
	p := &port{addr: ln.Addr().String(), backend: backend, ln: fl, conns: map[net.Conn]struct{}{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.accept()
	}()
	defer func() {
		p.close()
		<-done
	}()
	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "hi\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "hi\n" {
		t.Fatalf("through a port whose listener failed 3 times: read %q, %v; want the echo", line, err)
	}
	if accepted, _ := p.stats(); accepted != 1 {
		t.Errorf("%d connections accepted, want 1", accepted)
	}
}
