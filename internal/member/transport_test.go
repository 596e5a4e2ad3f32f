package member

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"

	"github.com/mccr-dev/mccr/internal/syncinformer"
)

// TestWatchesAreNotCompressed: a member's watch requests ask for an
// uncompressed stream; its other requests still accept gzip (and get it
// decoded), and a request that chose its encoding keeps it. With
// compressWatches, watches are left as Go's transport makes them.
func TestWatchesAreNotCompressed(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{} // request URI → Accept-Encoding
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.RequestURI()] = r.Header.Get("Accept-Encoding")
		mu.Unlock()
		if r.Header.Get("Accept-Encoding") == "gzip" {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			_, _ = io.WriteString(zw, "body")
			_ = zw.Close()
			return
		}
		_, _ = io.WriteString(w, "body")
	}))
	defer srv.Close()
	member, _, err := httpClients(context.Background(), &rest.Config{Host: srv.URL}, nil, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	get := func(uri, encoding string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL+uri, nil)
		if err != nil {
			t.Fatal(err)
		}
		if encoding != "" {
			req.Header.Set("Accept-Encoding", encoding)
		}
		resp, err := member.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if encoding == "" && string(b) != "body" {
			t.Errorf("GET %s read %q, want the body decoded", uri, b)
		}
	}
	get("/api/v1/configmaps?watch=true&resourceVersion=1", "")
	get("/api/v1/namespaces/a/configmaps?watch=1", "")
	get("/api/v1/configmaps?limit=500", "")
	get("/api/v1/secrets?watch=true", "br")

	want := map[string]string{
		"/api/v1/configmaps?watch=true&resourceVersion=1": "identity",
		"/api/v1/namespaces/a/configmaps?watch=1":         "identity",
		"/api/v1/configmaps?limit=500":                    "gzip",
		"/api/v1/secrets?watch=true":                      "br",
	}
	mu.Lock()
	for uri, enc := range want {
		if seen[uri] != enc {
			t.Errorf("GET %s sent Accept-Encoding %q, want %q", uri, seen[uri], enc)
		}
	}
	mu.Unlock()

	// With compressWatches, watches ask for gzip as Go's transport does.
	member, _, err = httpClients(context.Background(), &rest.Config{Host: srv.URL}, nil, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	get("/api/v1/pods?watch=true", "")
	mu.Lock()
	defer mu.Unlock()
	if enc := seen["/api/v1/pods?watch=true"]; enc != "gzip" {
		t.Errorf("with compressWatches, a watch sent Accept-Encoding %q, want gzip", enc)
	}
}

// runContextOf runs an informer made by syncinformer.Wrap and returns the
// context its run is given; the run ends when stop closes.
func runContextOf(t *testing.T, stop chan struct{}) context.Context {
	t.Helper()
	got := make(chan context.Context, 1)
	next := func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
		return capturing{SharedIndexInformer: toolscache.NewSharedIndexInformer(lw, obj, resync, idx), got: got}
	}
	inf := syncinformer.Wrap(nil, next, nil)(fcache.NewFakeControllerSource(), &corev1.Pod{}, 0, toolscache.Indexers{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.Run(stop)
	}()
	t.Cleanup(func() { <-done })
	return <-got
}

type capturing struct {
	toolscache.SharedIndexInformer
	got chan context.Context
}

func (c capturing) RunWithContext(ctx context.Context) {
	c.got <- ctx
	<-ctx.Done()
}

type recordingRT struct{ ctxs chan context.Context }

func (r recordingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	r.ctxs <- req.Context()
	return &http.Response{StatusCode: http.StatusOK, Body: &closeRecorder{Reader: strings.NewReader("")}, Request: req}, nil
}

type closeRecorder struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeRecorder) Close() error {
	c.closed.Store(true)
	return nil
}

// TestLifetimeTransport: a request ends when the member's lifetime does,
// whatever its own context; an informer's request goes out with its own
// context, which ends when the informer stops, and costs no goroutine.
func TestLifetimeTransport(t *testing.T) {
	lifetime, end := context.WithCancel(context.Background())
	rec := recordingRT{ctxs: make(chan context.Context, 2)}
	rt := &lifetimeTransport{next: rec, lifetime: lifetime}

	req := httptest.NewRequestWithContext(context.Background(), http.MethodGet, "https://member/api/v1/pods", nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	plain := <-rec.ctxs

	stop := make(chan struct{})
	type key struct{}
	informerCtx := context.WithValue(runContextOf(t, stop), key{}, "trace")
	ireq := httptest.NewRequestWithContext(informerCtx, http.MethodGet, "https://member/api/v1/pods?watch=true", nil)
	before := goruntime.NumGoroutine()
	iresp, err := rt.RoundTrip(ireq)
	if err != nil {
		t.Fatal(err)
	}
	if grew := goruntime.NumGoroutine() - before; grew > 0 {
		t.Errorf("an informer's request cost %d goroutines", grew)
	}
	if got := <-rec.ctxs; got != informerCtx {
		t.Error("an informer's request went out with another context")
	}

	end()
	select {
	case <-plain.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a request outlived the member's lifetime")
	}
	// The informer's stream is closed with the lifetime, and it may not
	// open another.
	body := iresp.Body.(*releasingBody).ReadCloser.(*closeRecorder)
	deadline := time.Now().Add(5 * time.Second)
	for !body.closed.Load() {
		if time.Now().After(deadline) {
			t.Fatal("an informer's response body outlived the member's lifetime")
		}
		time.Sleep(time.Millisecond)
	}
	late, err := rt.RoundTrip(ireq)
	if err == nil {
		_ = late.Body.Close()
	}
	if !errors.Is(err, errStoppedBeforeRequest) {
		t.Errorf("an informer's request after the lifetime = %v, want %v", err, errStoppedBeforeRequest)
	}
	if informerCtx.Err() != nil {
		t.Fatal("an informer's context ended before its informer stopped")
	}
	close(stop)
	select {
	case <-informerCtx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("an informer's request outlived its informer")
	}
	_ = resp.Body.Close()
	_ = iresp.Body.Close()
}
