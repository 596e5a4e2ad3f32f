// Package slowanswer makes an API server's answers to writes slow, for
// tests of what a client reports when a write's cluster goes away while
// the write waits for its answer.
//
// A Holder wraps a client's transport (rest.Config.WrapTransport): a write
// goes to the API server as usual, which applies it and answers, and the
// answer is then held back on the client's side until the test lets it go
// or the request's context ends. To the client above the transport this is
// an API server that applied the write and answers late, the case that
// cannot be told apart from one that has not applied it yet.
package slowanswer

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
)

// Holder holds back the answers to writes while it holds. Its methods are
// safe for concurrent use. The zero value holds nothing; Hold starts.
type Holder struct {
	mu   sync.Mutex
	gate chan struct{} // nil while not holding

	held     atomic.Int64 // answers being held now
	answered atomic.Int64 // writes the API server answered
}

// Wrap returns rt with writes' answers held while h holds. It has the
// signature of rest.Config.WrapTransport.
func (h *Holder) Wrap(rt http.RoundTripper) http.RoundTripper {
	return &transport{h: h, next: rt}
}

// Hold holds the answers to writes sent from now on, until Release.
func (h *Holder) Hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gate == nil {
		h.gate = make(chan struct{})
	}
}

// Release lets every held answer go, and holds no more.
func (h *Holder) Release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gate != nil {
		close(h.gate)
		h.gate = nil
	}
}

// Held returns how many answers are being held now: writes that the API
// server has answered and whose callers still wait.
func (h *Holder) Held() int { return int(h.held.Load()) }

// Answered returns how many writes the API server has answered so far,
// held or not.
func (h *Holder) Answered() int { return int(h.answered.Load()) }

func (h *Holder) current() chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gate
}

type transport struct {
	h    *Holder
	next http.RoundTripper
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || !isWrite(req) {
		return resp, err
	}
	t.h.answered.Add(1)
	gate := t.h.current()
	if gate == nil {
		return resp, nil
	}
	t.h.held.Add(1)
	defer t.h.held.Add(-1)
	select {
	case <-gate:
		return resp, nil
	case <-req.Context().Done():
		// The answer is lost, as when a connection is cut before it
		// arrives.
		_ = resp.Body.Close()
		return nil, context.Cause(req.Context())
	}
}

// WrappedRoundTripper lets client-go's helpers see through the wrapper.
func (t *transport) WrappedRoundTripper() http.RoundTripper { return t.next }

func isWrite(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}
