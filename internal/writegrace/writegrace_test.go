package writegrace_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/internal/writegrace"
)

var (
	errNotSent = errors.New("not sent")
	errLate    = errors.New("grace ended")
)

// slowServer answers each POST once release is closed (or the request
// ends), and tells arrived when a POST has arrived.
func slowServer(t *testing.T) (srv *httptest.Server, arrived chan struct{}, release chan struct{}) {
	t.Helper()
	arrived = make(chan struct{}, 16)
	release = make(chan struct{})
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		arrived <- struct{}{}
		select {
		case <-release:
			_, _ = io.WriteString(w, "applied")
		case <-r.Context().Done():
		}
	}))
	return srv, arrived, release
}

// post sends a POST under ctx and returns its result on the channel.
func post(ctx context.Context, t *testing.T, hc *http.Client, url string) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("{}"))
		if err != nil {
			done <- err
			return
		}
		resp, err := hc.Do(req)
		if err != nil {
			done <- err
			return
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err == nil && string(b) != "applied" {
			err = errors.New("unexpected answer " + string(b))
		}
		done <- err
	}()
	return done
}

func within(t *testing.T, ch <-chan error, d time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		t.Fatalf("not within %s: %s", d, what)
		return nil
	}
}

// TestSentWriteGetsItsAnswerWithinTheGrace: a write whose request left
// before end ended is not cut then, and gets the answer that comes within
// the grace.
func TestSentWriteGetsItsAnswerWithinTheGrace(t *testing.T) {
	leakcheck.Cleanup(t)
	srv, arrived, release := slowServer(t)
	defer srv.Close()
	hc := srv.Client()
	defer hc.CloseIdleConnections()
	end, cancel := context.WithCancel(context.Background())
	ctx, w := writegrace.Start(context.Background(), end, 10*time.Second, errNotSent, errLate)
	done := post(ctx, t, hc, srv.URL)
	<-arrived
	if !w.Sent() {
		t.Fatal("a request the server received does not count as sent")
	}
	cancel()
	// Long enough for a cut at end to have happened; the answer comes
	// after it.
	time.Sleep(200 * time.Millisecond)
	if err := context.Cause(ctx); err != nil {
		t.Fatalf("the write was cut as end ended: %v", err)
	}
	close(release)
	if err := within(t, done, 5*time.Second, "the write's answer"); err != nil {
		t.Fatalf("the write lost its answer: %v", err)
	}
	w.Done()
	if ctx.Err() == nil {
		t.Error("the write's context outlived Done")
	}
}

// TestSentWriteIsCutOnceItsGraceEnds: without an answer, a sent write ends
// one grace after end, with the late cause; with no grace, at once.
func TestSentWriteIsCutOnceItsGraceEnds(t *testing.T) {
	leakcheck.Cleanup(t)
	srv, arrived, release := slowServer(t)
	defer srv.Close()
	defer close(release)
	hc := srv.Client()
	defer hc.CloseIdleConnections()
	for _, grace := range []time.Duration{300 * time.Millisecond, 0} {
		end, cancel := context.WithCancel(context.Background())
		ctx, w := writegrace.Start(context.Background(), end, grace, errNotSent, errLate)
		done := post(ctx, t, hc, srv.URL)
		<-arrived
		cancel()
		ended := time.Now()
		err := within(t, done, grace+5*time.Second, "the cut of a write without an answer")
		took := time.Since(ended)
		if !errors.Is(err, errLate) || !w.Sent() {
			t.Errorf("grace %s: write = %v (sent %v), want %v", grace, err, w.Sent(), errLate)
		}
		if took < grace {
			t.Errorf("grace %s: cut after %s, before its grace ended", grace, took)
		}
		t.Logf("grace %s: cut %s after end", grace, took.Round(time.Millisecond))
		w.Done()
	}
}

// TestUnsentWriteEndsAtOnce: a write whose request has not left (its
// connection is still being dialled) ends as end does, with the notSent
// cause, and counts as not sent.
func TestUnsentWriteEndsAtOnce(t *testing.T) {
	leakcheck.Cleanup(t)
	dialing := make(chan struct{}, 1)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		dialing <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}}}
	defer hc.CloseIdleConnections()
	end, cancel := context.WithCancel(context.Background())
	ctx, w := writegrace.Start(context.Background(), end, time.Hour, errNotSent, errLate)
	done := post(ctx, t, hc, "http://127.0.0.1:1/")
	<-dialing
	cancel()
	err := within(t, done, 5*time.Second, "the end of an unsent write")
	if !errors.Is(err, errNotSent) || w.Sent() {
		t.Errorf("unsent write = %v (sent %v), want %v", err, w.Sent(), errNotSent)
	}
	w.Done()
}

// TestParentBoundsTheGrace: the caller's own deadline ends a write within
// its grace.
func TestParentBoundsTheGrace(t *testing.T) {
	leakcheck.Cleanup(t)
	srv, arrived, release := slowServer(t)
	defer srv.Close()
	defer close(release)
	hc := srv.Client()
	defer hc.CloseIdleConnections()
	// Long enough for the request to arrive on a loaded machine.
	parent, stop := context.WithTimeout(context.Background(), 3*time.Second)
	defer stop()
	end, cancel := context.WithCancel(context.Background())
	ctx, w := writegrace.Start(parent, end, time.Hour, errNotSent, errLate)
	done := post(ctx, t, hc, srv.URL)
	<-arrived
	cancel()
	if err := within(t, done, 10*time.Second, "the caller's deadline"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("write = %v, want the caller's deadline", err)
	}
	w.Done()
}

// TestDoneBeforeEnd: a write that returned before end ended is left alone
// by it, and holds no timer or goroutine; a nil end never ends.
func TestDoneBeforeEnd(t *testing.T) {
	leakcheck.Cleanup(t)
	end, cancel := context.WithCancel(context.Background())
	ctx, w := writegrace.Start(context.Background(), end, time.Hour, errNotSent, errLate)
	w.Done()
	cancel()
	if c := context.Cause(ctx); !errors.Is(c, context.Canceled) {
		t.Errorf("cause after Done = %v, want plain cancellation", c)
	}
	ctx, w = writegrace.Start(context.Background(), nil, time.Hour, errNotSent, errLate)
	if ctx.Err() != nil || w.Sent() {
		t.Error("a write with no end ended or was sent")
	}
	w.Done()
}

// BenchmarkStart is what a write pays for its grace: the trace and the
// context that ends with its route, set up and released.
func BenchmarkStart(b *testing.B) {
	end := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		_, w := writegrace.Start(context.Background(), end, time.Second, errNotSent, errLate)
		w.Done()
	}
}
