package reach

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// TestProbeAsksBelowTheHostPath: a cluster reached through a proxy that
// serves it under a path (https://proxy/k8s/clusters/c-1) is probed at
// that path's /version, not the proxy's own; anything else would answer
// for the proxy (a 404 still counts as an answer).
func TestProbeAsksBelowTheHostPath(t *testing.T) {
	var (
		mu    sync.Mutex
		paths []string
	)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path+" "+r.Header.Get("Accept"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"37"}`))
	}))
	defer s.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	m, err := New(&rest.Config{Host: s.URL + "/k8s/clusters/c-1", Transport: tr, QPS: -1}, Options{Timeout: 5 * time.Second}, newEvents())
	if err != nil {
		t.Fatal(err)
	}
	res, ok := m.probe(context.Background())
	if !ok || res.Err != nil {
		t.Fatalf("probe: ok %v, %v", ok, res.Err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := "/k8s/clusters/c-1/version application/json"; len(paths) != 1 || paths[0] != want {
		t.Errorf("probe asked %q, want [%q]", paths, want)
	}
}

// TestProbeReadsTheWholeAnswer: an answer that stops after its headers
// and part of its body is no answer: the probe waits for the rest until
// its Timeout and says so, as for an answer that never began. One that
// comes whole, however large, is read to its end (and a 5xx, however
// whole, says the API server is not there).
func TestProbeReadsTheWholeAnswer(t *testing.T) {
	stop := make(chan struct{})
	var mode sync.Map
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch v, _ := mode.Load("mode"); v {
		case "stall":
			_, _ = w.Write([]byte(`{"major":"1",`))
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-stop:
			}
		case "large":
			_, _ = w.Write([]byte(`{"major":"1","pad":"` + strings.Repeat("x", 3*maxProbeAnswer) + `"}`))
		case "bad gateway":
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte(`no backend`))
		}
	}))
	defer s.Close()
	defer close(stop)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	const timeout = 300 * time.Millisecond
	m, err := New(&rest.Config{Host: s.URL, Transport: tr, QPS: -1}, Options{Timeout: timeout}, newEvents())
	if err != nil {
		t.Fatal(err)
	}

	mode.Store("mode", "stall")
	res, ok := m.probe(context.Background())
	if !ok || !errors.Is(res.Err, ErrNoAnswer) {
		t.Errorf("an answer cut after its first bytes: ok %v, %v; want ErrNoAnswer", ok, res.Err)
	}
	if res.Took < timeout {
		t.Errorf("an answer cut after its first bytes was judged after %s, before the probe's timeout (%s)", res.Took, timeout)
	}

	// The answers that come whole get a timeout a loaded machine cannot
	// reach.
	m.o.Timeout = 10 * time.Second
	mode.Store("mode", "large")
	if res, ok := m.probe(context.Background()); !ok || res.Err != nil {
		t.Errorf("a large answer: ok %v, %v; want an answer", ok, res.Err)
	}

	mode.Store("mode", "bad gateway")
	res, ok = m.probe(context.Background())
	if !ok || res.Err == nil || errors.Is(res.Err, ErrNoAnswer) || !strings.Contains(res.Err.Error(), "502") {
		t.Errorf("a 502: ok %v, %v; want unreachable, naming the status", ok, res.Err)
	}
}
