package member

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
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
	member, _, err := httpClients(context.Background(), &rest.Config{Host: srv.URL}, false)
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
	member, _, err = httpClients(context.Background(), &rest.Config{Host: srv.URL}, true)
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
