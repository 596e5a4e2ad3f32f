package test_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/internal/conntrack"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/test"
)

// proxyClient returns a client of cfg with connections of its own, closed
// when the test ends (or by the returned func), so that no connection of
// one test is reused by the next.
func proxyClient(t *testing.T, cfg *rest.Config) (*kubernetes.Clientset, func()) {
	t.Helper()
	cfg, conns := conntrack.Wrap(cfg)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conns.Close)
	return cs, conns.Close
}

// getDefault reads the default namespace within timeout and says how long
// it took.
func getDefault(cs *kubernetes.Clientset, timeout time.Duration) (time.Duration, error) {
	begin := time.Now() // before the deadline is set: a Get that runs to it took timeout at least
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	return time.Since(begin), err
}

func mustGet(t *testing.T, cs *kubernetes.Clientset, what string) {
	t.Helper()
	if _, err := getDefault(cs, 10*time.Second); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestFaultProxyPasses(t *testing.T) {
	one := fleet.Cluster("one")
	p := test.NewFaultProxy(t, one.Config)
	cfg := p.Config()
	if cfg.Host != "https://"+p.Address() || !strings.HasPrefix(p.Address(), "127.0.0.1:") {
		t.Errorf("proxied config's host %q, proxy at %s", cfg.Host, p.Address())
	}
	if cfg.ServerName == "" || len(cfg.CAData) == 0 || cfg.Insecure {
		t.Errorf("proxied config does not verify the API server's certificate as the target did: server name %q, %d bytes of CA, insecure %v", cfg.ServerName, len(cfg.CAData), cfg.Insecure)
	}
	if one.Config.Host == cfg.Host {
		t.Error("Config changed the target config")
	}
	cs, _ := proxyClient(t, cfg)
	mustGet(t, cs, "Get through the proxy")
	st := p.Stats()
	if st.Accepted != 1 || st.Open != 1 || st.ToServer == 0 || st.ToClient == 0 || st.Lost != 0 {
		t.Errorf("stats after one Get: %+v", st)
	}
}

func TestFaultProxyFreezeHangsUntilPass(t *testing.T) {
	p := test.NewFaultProxy(t, fleet.Cluster("one").Config)
	cs, _ := proxyClient(t, p.Config())
	mustGet(t, cs, "Get before the freeze")
	if err := p.Freeze(); err != nil {
		t.Fatal(err)
	}
	took, err := getDefault(cs, 2*time.Second)
	if err == nil || took < 2*time.Second {
		t.Fatalf("Get while frozen returned after %s: %v; want it to hang until its 2s timeout", took, err)
	}
	open := p.Stats().Open
	if err := p.Pass(); err != nil {
		t.Fatal(err)
	}
	mustGet(t, cs, "Get after Pass")
	if st := p.Stats(); st.Accepted != 1 || open != 1 {
		t.Errorf("the frozen connection was not resumed: %d open while frozen, %d accepted in all", open, st.Accepted)
	}

	// Cut before Pass ends the frozen connections; the client dials again.
	// Its first request may still go out on the cut connection, before the
	// client has read its end, and fail: as on any connection cut under a
	// client, the next one dials afresh.
	if err := p.Freeze(); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	if err := p.Pass(); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 10*time.Second, "a Get through the proxy after Cut and Pass", func() bool {
		_, err := getDefault(cs, 2*time.Second)
		return err == nil
	})
	if st := p.Stats(); st.Accepted != 2 {
		t.Errorf("%d connections accepted, want a second one after Cut", st.Accepted)
	}
}

func TestFaultProxyRefuse(t *testing.T) {
	p := test.NewFaultProxy(t, fleet.Cluster("one").Config)
	cs, _ := proxyClient(t, p.Config())
	mustGet(t, cs, "Get before Refuse")
	p.Refuse()
	took, err := getDefault(cs, 20*time.Second)
	if err == nil || took > 5*time.Second {
		t.Fatalf("Get while refusing returned after %s: %v; want an error at once", took, err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("Get while refusing: %v, want connection refused or reset", err)
	}
	if c, err := net.Dial("tcp", p.Address()); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			_ = c.Close()
		}
		t.Errorf("dialing the refusing proxy: %v, want connection refused", err)
	}
	test.Eventually(t, 5*time.Second, "no connection open", func() bool { return p.Stats().Open == 0 })
	if err := p.Pass(); err != nil {
		t.Fatal(err)
	}
	mustGet(t, cs, "Get after Pass")
}

// TestFaultProxyLoseAnswers: a create whose answer is lost is applied,
// and its caller gets an error soon, not at its timeout. Over HTTP/2 (Config)
// that holds for a small write; over HTTP/1.1 (HTTP1Config) for a write
// larger than kube-apiserver's HTTP/2 window for one stream (256 KiB).
func TestFaultProxyLoseAnswers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config func(*test.FaultProxy) *rest.Config
		size   int
	}{
		{"small write over HTTP2", (*test.FaultProxy).Config, 1 << 10},
		{"large write over HTTP1.1", (*test.FaultProxy).HTTP1Config, 600 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			p := test.NewFaultProxy(t, fleet.Cluster("one").Config)
			cs, _ := proxyClient(t, tc.config(p))
			mustGet(t, cs, "Get before losing answers")
			if err := p.LoseAnswers(); err != nil {
				t.Fatal(err)
			}
			name := test.NamespaceName(t)
			cm := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
				Data:       map[string]string{"data": strings.Repeat("x", tc.size)},
			}
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			begin := time.Now()
			_, err := cs.CoreV1().ConfigMaps("default").Create(cctx, cm, metav1.CreateOptions{})
			took := time.Since(begin)
			if err == nil {
				t.Fatal("Create whose answer was lost succeeded")
			}
			if cctx.Err() != nil {
				t.Fatalf("Create whose answer was lost hung for %s: %v", took, err)
			}
			t.Logf("Create failed after %s: %v", took, err)
			admin := fleet.Cluster("one").AdminClient(t)
			got := &corev1.ConfigMap{}
			if err := admin.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, got); err != nil {
				t.Fatalf("the Create whose answer was lost was not applied: %v", err)
			}
			if len(got.Data["data"]) != tc.size {
				t.Errorf("the ConfigMap created holds %d bytes, want %d", len(got.Data["data"]), tc.size)
			}
			if p.Stats().Lost == 0 {
				t.Error("no byte counted as lost")
			}
			test.Eventually(t, 5*time.Second, "the connection that lost answers is cut", func() bool { return p.Stats().Open == 0 })
			if err := p.Pass(); err != nil {
				t.Fatal(err)
			}
			mustGet(t, cs, "Get after Pass")
		})
	}
}

// TestFaultProxyLoseAnswersAppliesALargeWriteOverHTTP1: through
// HTTP1Config, a write larger than any HTTP/2 window reaches a server that
// offers HTTP/2 whole, and once, while its caller gets an error.
func TestFaultProxyLoseAnswersAppliesALargeWriteOverHTTP1(t *testing.T) {
	const size = 4 << 20
	var started, applied atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			_, _ = io.WriteString(w, "ok")
			return
		}
		started.Add(1)
		if r.ProtoMajor != 1 {
			t.Errorf("the write came over %s, want HTTP/1.1", r.Proto)
		}
		if n, err := io.Copy(io.Discard, r.Body); err == nil && n == size {
			applied.Add(1)
		}
		_, _ = io.WriteString(w, "applied")
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	p := test.NewFaultProxy(t, &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
	cfg := p.HTTP1Config()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.CloseIdleConnections()
	call := func(method string, body io.Reader) error {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, cfg.Host+"/", body)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		_, err = io.ReadAll(resp.Body)
		if ctx.Err() != nil {
			t.Fatalf("%s hung until its timeout", method)
		}
		return err
	}
	if err := call(http.MethodGet, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.LoseAnswers(); err != nil {
		t.Fatal(err)
	}
	if err := call(http.MethodPost, bytes.NewReader(bytes.Repeat([]byte("x"), size))); err == nil {
		t.Fatal("a write whose answer was lost succeeded")
	}
	if n, m := started.Load(), applied.Load(); n != 1 || m != 1 {
		t.Fatalf("the write reached the server %d times and was applied whole %d times, want once; stats %+v", n, m, p.Stats())
	}
}

func TestFaultProxyLatency(t *testing.T) {
	p := test.NewFaultProxy(t, fleet.Cluster("one").Config)
	cs, _ := proxyClient(t, p.Config())
	mustGet(t, cs, "Get before the latency")
	const d = 300 * time.Millisecond
	p.SetLatency(d)
	took, err := getDefault(cs, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The request and its answer are each held d.
	if took < 2*d {
		t.Errorf("a round trip with %s each way took %s", d, took)
	}
	p.SetLatency(0)
	mustGet(t, cs, "Get without latency")
}

// echoServer accepts connections on loopback and writes back what it
// reads until the client half-closes, then closes. It counts the
// connections it accepted.
type echoServer struct {
	addr     string
	accepted atomic.Int32
}

func newEchoServer(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{addr: ln.Addr().String()}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer func() { _ = c.Close() }()
				_, _ = io.Copy(c, c)
			})
		}
	})
	return e
}

func (e *echoServer) config() *rest.Config { return &rest.Config{Host: "http://" + e.addr} }

// TestFaultProxyFrozenConnectionReachesNothingUntilPass: a connection
// opened while frozen is accepted but not passed on; after Pass its bytes
// arrive in order, and half-closes pass through.
func TestFaultProxyFrozenConnectionReachesNothingUntilPass(t *testing.T) {
	e := newEchoServer(t)
	p := test.NewFaultProxy(t, e.config())
	if err := p.Freeze(); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Address())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	var want bytes.Buffer
	for i := range 100 {
		line := fmt.Sprintf("line %d\n", i)
		want.WriteString(line)
		if _, err := io.WriteString(c, line); err != nil {
			t.Fatal(err)
		}
	}
	test.Eventually(t, 5*time.Second, "the proxy accepted the connection", func() bool { return p.Stats().Accepted == 1 })
	if n := e.accepted.Load(); n != 0 || p.Stats().ToServer != 0 {
		t.Fatalf("while frozen, the server accepted %d connections and got %d bytes", n, p.Stats().ToServer)
	}
	if err := p.Pass(); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("after Pass read %q, %v; want what was sent while frozen, in order, then the end", got, err)
	}
	test.Eventually(t, 5*time.Second, "the ended connection is closed", func() bool { return p.Stats().Open == 0 })
}

// TestFaultProxyLatencyKeepsOrderWithoutAddingUp: chunks sent back to back
// are each delayed from when the proxy read them, in order; the delays do
// not add up.
func TestFaultProxyLatencyKeepsOrderWithoutAddingUp(t *testing.T) {
	e := newEchoServer(t)
	p := test.NewFaultProxy(t, e.config())
	const d = 100 * time.Millisecond
	p.SetLatency(d)
	c, err := net.Dial("tcp", p.Address())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	var want bytes.Buffer
	begin := time.Now()
	const n = 200
	for i := range n {
		line := fmt.Sprintf("chunk %d\n", i)
		want.WriteString(line)
		if _, err := io.WriteString(c, line); err != nil {
			t.Fatal(err)
		}
		if i%20 == 0 {
			time.Sleep(time.Millisecond) // split the stream into many chunks
		}
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, err := io.ReadAll(c)
	took := time.Since(begin)
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("read %q, %v; want what was sent, in order", got, err)
	}
	if took < 2*d || took > n*d/4 {
		t.Errorf("%d writes through %s each way took %s: want at least %s, and far less than the delays added up", n, d, took, 2*d)
	}
}

func TestFaultProxyCloseLeavesNoGoroutine(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	p, err := test.StartFaultProxy(fleet.Cluster("one").Config)
	if err != nil {
		t.Fatal(err)
	}
	cs, closeConns := proxyClient(t, p.Config())
	mustGet(t, cs, "Get through the proxy")
	// A call hanging in a frozen connection, another connection waiting for
	// its lost answers to be cut, and a latency timer: Close ends them all.
	if err := p.Freeze(); err != nil {
		t.Fatal(err)
	}
	hung := make(chan error, 1)
	go func() {
		_, err := getDefault(cs, time.Minute)
		hung <- err
	}()
	lossy, closeLossy := proxyClient(t, p.Config())
	lossyDone := make(chan error, 1)
	go func() {
		_, err := getDefault(lossy, time.Minute)
		lossyDone <- err
	}()
	test.Eventually(t, 5*time.Second, "two connections open", func() bool { return p.Stats().Open == 2 })
	p.SetLatency(time.Hour)
	if err := p.LoseAnswers(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := p.Pass(); !errors.Is(err, test.ErrFaultProxyClosed) {
		t.Errorf("Pass after Close: %v, want ErrFaultProxyClosed", err)
	}
	if st := p.Stats(); st.Open != 0 {
		t.Errorf("%d connections open after Close", st.Open)
	}
	closeConns()
	closeLossy()
	for _, ch := range []chan error{hung, lossyDone} {
		select {
		case err := <-ch:
			if err == nil {
				t.Error("a call through the closed proxy succeeded")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a call through the closed proxy still hangs")
		}
	}
	leakcheck.VerifyNone(t, ignore)
}

func TestStartFaultProxyRejectsABadHost(t *testing.T) {
	if _, err := test.StartFaultProxy(&rest.Config{Host: "https://[::1"}); err == nil {
		t.Fatal("a proxy for a malformed host started")
	}
}

// TestFaultProxyLeavesRefuseOnceUnderConcurrentModeChanges: mode changes
// that leave Refuse at the same time listen once, and none of them fails.
func TestFaultProxyLeavesRefuseOnceUnderConcurrentModeChanges(t *testing.T) {
	e := newEchoServer(t)
	p := test.NewFaultProxy(t, e.config())
	for i := range 200 {
		p.Refuse()
		var (
			wg    sync.WaitGroup
			errs  [4]error
			start = make(chan struct{})
		)
		for j, leave := range []func() error{p.Pass, p.Freeze, p.Pass, p.LoseAnswers} {
			wg.Go(func() {
				<-start
				errs[j] = leave()
			})
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs[:]...); err != nil {
			t.Fatalf("round %d: leaving Refuse concurrently: %v", i, err)
		}
		c, err := net.Dial("tcp", p.Address())
		if err != nil {
			t.Fatalf("round %d: the proxy does not listen after leaving Refuse: %v", i, err)
		}
		_ = c.Close()
	}
}

// TestFaultProxyFreezeHidesResets: a side that resets its connection while
// frozen leaves the other side's open and silent, as a partition does;
// Pass resets it.
func TestFaultProxyFreezeHidesResets(t *testing.T) {
	for _, resets := range []string{"client", "server"} {
		t.Run(resets, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = ln.Close() }()
			p := test.NewFaultProxy(t, &rest.Config{Host: "http://" + ln.Addr().String()})
			client, err := net.Dial("tcp", p.Address())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = client.Close() }()
			if _, err := io.WriteString(client, "hi"); err != nil {
				t.Fatal(err)
			}
			server, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = server.Close() }()
			if _, err := io.ReadFull(server, make([]byte, 2)); err != nil {
				t.Fatal(err)
			}
			if err := p.Freeze(); err != nil {
				t.Fatal(err)
			}
			gone, other := client, server
			if resets == "server" {
				gone, other = server, client
			}
			_ = gone.(*net.TCPConn).SetLinger(0)
			_ = gone.Close() // a reset
			_ = other.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			if n, err := other.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("while frozen, the %s's peer read %d bytes, %v; want nothing until its deadline", resets, n, err)
			}
			if st := p.Stats(); st.Open != 1 {
				t.Errorf("while frozen, %d connections open, want the one whose %s reset", st.Open, resets)
			}
			if err := p.Pass(); err != nil {
				t.Fatal(err)
			}
			_ = other.SetReadDeadline(time.Now().Add(10 * time.Second))
			if n, err := other.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("after Pass, the %s's peer read %d bytes, %v; want a reset", resets, n, err)
			}
			test.Eventually(t, 5*time.Second, "the reset connection is closed", func() bool { return p.Stats().Open == 0 })
		})
	}
}
