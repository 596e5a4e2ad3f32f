// Package writegrace gives a write already sent a bounded time to get its
// answer once the way it was sent by ends: a cluster's route in the fan-out
// client, a member's lifetime in its transport.
//
// Cutting such a write at once loses its outcome, not the write: the API
// server may apply it all the same, and the caller, told that the cluster
// went away, retries and writes twice (with generateName, a second
// object). A write whose request has not left yet is cut at once instead:
// nothing reached the API server, so nothing is lost, and the caller learns
// it as soon as possible.
//
// Whether a request left is what net/http/httptrace reports: a write has
// been sent once the headers of one of its requests were written (client-go
// may send a request more than once; one sent is enough for the API server
// to have acted on it).
package writegrace

import (
	"context"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"
)

// Write follows one write in flight. Its methods are safe for concurrent
// use.
type Write struct {
	sent   atomic.Bool
	grace  time.Duration
	late   error
	cancel context.CancelCauseFunc
	stop   func() bool

	mu       sync.Mutex
	finished bool
	timer    *time.Timer
}

// Start returns the context to send a write with, and the Write that
// follows it. The context ends with parent (its deadline stays the
// write's own bound), and once end ends: at once, with cause notSent, if no
// request of the write has been sent by then; otherwise grace later, with
// cause late (at once when grace is not positive). A nil end never ends.
// Call Done when the write has returned.
func Start(parent, end context.Context, grace time.Duration, notSent, late error) (context.Context, *Write) {
	w := &Write{grace: grace, late: late}
	trace := &httptrace.ClientTrace{WroteHeaders: func() { w.sent.Store(true) }}
	ctx := httptrace.WithClientTrace(parent, trace)
	if end == nil {
		return ctx, w
	}
	ctx, w.cancel = context.WithCancelCause(ctx)
	w.stop = context.AfterFunc(end, func() {
		if !w.sent.Load() {
			w.cancel(notSent)
			return
		}
		w.startGrace()
	})
	return ctx, w
}

// startGrace cuts the write grace from now, unless it has returned.
func (w *Write) startGrace() {
	if w.grace <= 0 {
		w.cancel(w.late)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.finished {
		w.timer = time.AfterFunc(w.grace, func() { w.cancel(w.late) })
	}
}

// Sent reports whether a request of the write was sent: its headers were
// written, so the API server may have acted on it. False means that
// nothing of it reached the API server.
func (w *Write) Sent() bool { return w.sent.Load() }

// Done releases what Start set up. The write's context ends.
func (w *Write) Done() {
	if w.cancel == nil {
		return
	}
	w.stop()
	w.mu.Lock()
	w.finished = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
	w.cancel(nil)
}
