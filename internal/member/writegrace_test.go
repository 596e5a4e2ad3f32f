package member

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/client"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/internal/slowanswer"
)

// slowWrites is an HTTP server whose POSTs are answered once release is
// closed (or their request ends) and whose GETs wait for their request to
// end: what a member's requests meet while the API server is slow.
type slowWrites struct {
	*httptest.Server
	arrived  chan string // method of each request, as it arrives
	release  chan struct{}
	requests atomic.Int64
}

func newSlowWrites(t *testing.T) *slowWrites {
	t.Helper()
	s := &slowWrites{arrived: make(chan string, 16), release: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		s.arrived <- r.Method
		if r.Method == http.MethodGet {
			<-r.Context().Done()
			return
		}
		select {
		case <-s.release:
			_, _ = io.WriteString(w, "applied")
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// send makes a request through rt and returns its result (the body read
// to the end) on the channel.
func send(rt http.RoundTripper, method, url string) <-chan error {
	done := make(chan error, 1)
	go func() {
		req, err := http.NewRequestWithContext(context.Background(), method, url, strings.NewReader("{}"))
		if err != nil {
			done <- err
			return
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			done <- err
			return
		}
		_, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		done <- err
	}()
	return done
}

func result(t *testing.T, ch <-chan error, d time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		t.Fatalf("not within %s: %s", d, what)
		return nil
	}
}

// TestMemberStopLetsWritesInFlightGetTheirAnswer: when a member's
// lifetime ends, a read in flight is cut at once, while a write already
// sent gets its grace and the answer that comes within it; the member's
// stop (writesInFlight.wait) waits for that write, and a write made from
// then on is refused before anything is sent, as the cluster not being
// ready.
func TestMemberStopLetsWritesInFlightGetTheirAnswer(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newSlowWrites(t)
	next := s.Client().Transport
	defer s.Client().CloseIdleConnections()
	lifetime, end := context.WithCancel(context.Background())
	defer end()
	writes := newWritesInFlight(10 * time.Second)
	rt := &lifetimeTransport{next: next, lifetime: lifetime, writes: writes}

	read := send(rt, http.MethodGet, s.URL+"/api/v1/configmaps")
	write := send(rt, http.MethodPost, s.URL+"/api/v1/namespaces/a/configmaps")
	<-s.arrived
	<-s.arrived
	end()
	if err := result(t, read, 5*time.Second, "a read cut with the member"); !errors.Is(err, errMemberStopped) {
		t.Errorf("read in flight = %v, want %v", err, errMemberStopped)
	}
	stopped := make(chan struct{})
	go func() {
		writes.wait()
		close(stopped)
	}()
	// The read was cut long ago; the write still waits, and so does the
	// member's stop.
	time.Sleep(200 * time.Millisecond)
	if isClosed(stopped) {
		t.Fatal("the member's stop did not wait for a write in flight")
	}
	close(s.release)
	if err := result(t, write, 5*time.Second, "the write's answer"); err != nil {
		t.Fatalf("write in flight as the member stopped = %v, want its answer", err)
	}
	waitClosed(t, stopped, 5*time.Second, "the member's stop once its write was answered")

	before := s.requests.Load()
	err := result(t, send(rt, http.MethodPost, s.URL+"/api/v1/namespaces/a/configmaps"), 5*time.Second, "a write after the stop")
	if !errors.Is(err, errStoppedBeforeRequest) || !errors.Is(err, client.ErrClusterNotReady) {
		t.Errorf("write after the member stopped = %v, want %v (cluster not ready)", err, errStoppedBeforeRequest)
	}
	if s.requests.Load() != before {
		t.Error("a write refused after the member stopped reached the server")
	}
}

// TestMemberStopCutsAWriteAfterItsGrace: a write sent that gets no answer
// is cut one grace after the member's lifetime ended, and the member's
// stop waits for no longer than that.
func TestMemberStopCutsAWriteAfterItsGrace(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newSlowWrites(t)
	defer close(s.release)
	next := s.Client().Transport
	defer s.Client().CloseIdleConnections()
	lifetime, end := context.WithCancel(context.Background())
	defer end()
	const grace = 500 * time.Millisecond
	writes := newWritesInFlight(grace)
	rt := &lifetimeTransport{next: next, lifetime: lifetime, writes: writes}

	write := send(rt, http.MethodPut, s.URL+"/api/v1/namespaces/a/configmaps/x")
	<-s.arrived
	end()
	ended := time.Now()
	stopped := make(chan struct{})
	go func() {
		writes.wait()
		close(stopped)
	}()
	err := result(t, write, grace+5*time.Second, "the cut of an unanswered write")
	took := time.Since(ended)
	if !errors.Is(err, errWriteGraceEnded) || errors.Is(err, client.ErrClusterNotReady) {
		t.Errorf("unanswered write = %v, want %v (and not cluster not ready: it was sent)", err, errWriteGraceEnded)
	}
	if took < grace {
		t.Errorf("write cut %s after the member stopped, before its grace of %s", took, grace)
	}
	waitClosed(t, stopped, grace+5*time.Second, "the member's stop")
	t.Logf("unanswered write cut %s after the member stopped (grace %s)", took.Round(time.Millisecond), grace)
}

// TestWriteGraceFollowsTheShutdownTimeout: a member's writes get the
// fan-out client's grace, never more than its graceful shutdown timeout,
// which bounds its stop.
func TestWriteGraceFollowsTheShutdownTimeout(t *testing.T) {
	for _, c := range []struct {
		shutdown *time.Duration
		want     time.Duration
	}{
		{nil, client.DefaultWriteGrace}, // 30s default
		{ptr.To(time.Minute), client.DefaultWriteGrace},
		{ptr.To(2 * time.Second), 2 * time.Second},
		{ptr.To(time.Duration(0)), 0},
		{ptr.To(-time.Second), client.DefaultWriteGrace}, // waits forever: the grace still bounds writes
	} {
		if got := writeGrace(c.shutdown); got != c.want {
			t.Errorf("writeGrace(%v) = %s, want %s", c.shutdown, got, c.want)
		}
	}
}

// TestManagerStopsOnceItsWriteIsAnswered: through a real member client, a
// Create whose answer is slow when the member stops returns the API
// server's answer, and Stopped closes only after it; one that gets no
// answer is cut within the grace (the graceful shutdown timeout here), and
// so is Stopped.
func TestManagerStopsOnceItsWriteIsAnswered(t *testing.T) {
	leakcheck.Cleanup(t)
	for _, answered := range []bool{true, false} {
		name := "unanswered"
		if answered {
			name = "answered"
		}
		t.Run(name, func(t *testing.T) {
			s := newFake(t)
			var slow slowanswer.Holder
			cfg := s.Config()
			cfg.WrapTransport = slow.Wrap
			lifetime, end := context.WithCancel(context.Background())
			defer end()
			shutdown := 2 * time.Second
			m := buildOn(t, cfg, BuildOptions{Lifetime: lifetime, Options: Options{GracefulShutdownTimeout: &shutdown}})
			r := run(t, m)
			if !m.GetCache().WaitForCacheSync(syncCtx(t)) {
				t.Fatal("cache not synced")
			}
			slow.Hold()
			defer slow.Release()
			created := make(chan error, 1)
			go func() { created <- m.GetClient().Create(context.Background(), configMap("a", "slow")) }()
			waitFor(t, 10*time.Second, "the Create's answer held", func() bool { return slow.Held() == 1 })
			end() // as a Server's attempt ends: lifetime, then the Manager
			r.cancel()
			stopping := time.Now()
			if answered {
				time.Sleep(300 * time.Millisecond)
				if isClosed(m.Stopped()) {
					t.Fatal("the Manager stopped while its write waited for its answer")
				}
				slow.Release()
				if err := <-created; err != nil {
					t.Fatalf("Create answered during the member's stop = %v, want success", err)
				}
			} else if err := <-created; !errors.Is(err, errWriteGraceEnded) || apierrors.IsAlreadyExists(err) {
				t.Fatalf("unanswered Create = %v, want %v", err, errWriteGraceEnded)
			}
			waitClosed(t, m.Stopped(), shutdown+5*time.Second, "Stopped")
			t.Logf("Stopped %s after the member's lifetime ended", time.Since(stopping).Round(time.Millisecond))
			// Either way the API server applied it.
			var cm corev1.ConfigMap
			if err := newClientFor(t, s.Config()).Get(context.Background(), crclient.ObjectKey{Namespace: "a", Name: "slow"}, &cm); err != nil {
				t.Errorf("the Create was not applied: %v", err)
			}
		})
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newClientFor(t *testing.T, cfg *rest.Config) crclient.Client {
	t.Helper()
	c, err := crclient.New(cfg, crclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
