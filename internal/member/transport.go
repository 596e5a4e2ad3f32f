package member

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/client"
	"github.com/mccr-dev/mccr/internal/credential"
	"github.com/mccr-dev/mccr/internal/leaninformer"
	"github.com/mccr-dev/mccr/internal/syncinformer"
	"github.com/mccr-dev/mccr/internal/writegrace"
)

// discoveryTimeout bounds each discovery request of a member's REST
// mapper. The mapper (leanmapper's, or controller-runtime's) asks for
// discovery with no context, and through the cache while the informer
// map's lock is held (controller-runtime's also holds its own):
// against an API server that accepts connections and never answers, one
// such request would otherwise block the member for good.
const discoveryTimeout = 30 * time.Second

// httpClients returns the HTTP client a member's cache and client use,
// on base's transport (a client built from cfg when base is nil), whose
// every request also ends when lifetime does (see lifetimeTransport
// for the informers' requests, and for writes, which get the grace of
// writes unless it is nil; and whose watches are uncompressed unless
// compressWatches), and the one for its REST mapper. The mapper may be
// shared with other members of the same API server and identity, so it
// must not die with this one: its requests are bounded by
// discoveryTimeout instead.
//
// With an exec plugin, both send a request refused with 401 once more
// (credential.RetryRefused): the plugin has renewed the credential by
// then, and the caller (a reconciler's write, an informer's list or
// watch, which would relist after a failed watch) gets the answer to the
// fresh one.
func httpClients(lifetime context.Context, cfg *rest.Config, base *http.Client, compressWatches bool, writes *writesInFlight) (member, mapper *http.Client, err error) {
	if base == nil {
		if base, err = rest.HTTPClientFor(cfg); err != nil {
			return nil, nil, err
		}
	}
	rt := base.Transport
	if rt == nil { // client-go's http.DefaultClient: no TLS, no wrappers
		rt = http.DefaultTransport
	}
	if credential.Refreshes(cfg) {
		rt = credential.RetryRefused(rt)
	}
	memberRT := rt
	if !compressWatches {
		memberRT = plainWatches{rt}
	}
	member = &http.Client{Transport: &lifetimeTransport{next: memberRT, lifetime: lifetime, writes: writes}, Timeout: base.Timeout, Jar: base.Jar}
	mapper = &http.Client{Transport: rt, Timeout: discoveryTimeout, Jar: base.Jar}
	if base.Timeout > 0 && base.Timeout < discoveryTimeout {
		mapper.Timeout = base.Timeout
	}
	return member, mapper, nil
}

// plainWatches asks for watch streams without compression. Go's transport
// asks for gzip on its own, and the API server compresses a watch stream
// then: a stream of small events that stays open for the member's life,
// which holds a 32 KiB decompression window (and some 10 KiB of reader
// state) in the member, as many on the server, and costs CPU on both
// sides per event. A request that sets Accept-Encoding itself, and every
// other request (a large List compresses well), is left as it is.
type plainWatches struct{ next http.RoundTripper }

func (t plainWatches) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Accept-Encoding") != "" || !isWatch(req) {
		return t.next.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	req.Header.Set("Accept-Encoding", "identity")
	return t.next.RoundTrip(req)
}

// WrappedRoundTripper lets client-go's helpers see through the wrapper.
func (t plainWatches) WrappedRoundTripper() http.RoundTripper { return t.next }

// isWatch reports whether req opens a watch (client-go sets watch=true).
func isWatch(req *http.Request) bool {
	if !strings.Contains(req.URL.RawQuery, "watch=") {
		return false // most requests: no query to parse
	}
	w := req.URL.Query().Get("watch")
	return w == "true" || w == "1"
}

// lifetimeTransport ends each request (and the reading of its body, a
// watch's stream among them) when the member's lifetime ends, whatever the
// request's own context; writes get a grace first (see writeRoundTrip).
//
// The requests of the cache's own informers (leaninformer's, run by the
// cache's Runner) end when the lifetime does, their context being derived
// from it: they are sent as they are (leanRoundTrip). Those of informers
// that controller-runtime runs keep their own context, which ends when the
// informer stops (see syncinformer.InformerRun): a context derived from it
// would cost a goroutine per request. Their bodies (a watch's
// stream) are closed when the lifetime ends, and once it has ended they are
// refused; a request of theirs still waiting for its answer then ends when
// the informer stops, which the member's cache does before its Manager's
// Start returns.
type lifetimeTransport struct {
	next     http.RoundTripper
	lifetime context.Context
	// writes gives writes their grace; nil cuts them with the lifetime,
	// as any other request.
	writes *writesInFlight
}

var (
	// errStoppedBeforeRequest refuses a request of an informer, or a write,
	// made once the member's lifetime has ended, and cuts a write not sent
	// yet when it ends. Nothing reached the API server: the cluster is not
	// ready, as the fan-out client tells its callers.
	errStoppedBeforeRequest = fmt.Errorf("member cluster stopped: request not sent: %w", client.ErrClusterNotReady)
	// errWriteGraceEnded cuts a write whose answer did not come within its
	// grace after the member's lifetime ended. The API server may have
	// applied it.
	errWriteGraceEnded = errors.New("member cluster stopped and the write's answer did not come within its grace")
	// errMemberStopped ends a read that waited on a member that stopped
	// (for its cache, or for its API server's answer) while the read's own
	// context still ran: the cluster is not ready, as the fan-out client
	// tells its callers, and the caller's context was not canceled.
	errMemberStopped = fmt.Errorf("member cluster stopped during the read: %w", client.ErrClusterNotReady)
)

func (t *lifetimeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if rc := leaninformer.RunnerContext(req.Context()); rc != nil && rc.Done() == t.lifetime.Done() {
		return t.leanRoundTrip(req)
	}
	if syncinformer.InformerRun(req.Context()) {
		return t.informerRoundTrip(req)
	}
	if t.writes != nil && isWrite(req) {
		return t.writeRoundTrip(req)
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	stop := context.AfterFunc(t.lifetime, func() { cancel(errMemberStopped) })
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		stop()
		cancel(nil)
		return nil, stoppedRead(ctx, req, err)
	}
	body := &releasingBody{ReadCloser: resp.Body, release: func() { stop(); cancel(nil) }}
	resp.Body = body
	if !isWrite(req) {
		resp.Body = &readBody{releasingBody: body, req: req, ctx: ctx}
	}
	return resp, nil
}

// stoppedRead is the error of a read request sent under ctx (req's context
// cut when the member stops): errMemberStopped when the member's stop cut
// it while req's own context still runs, rather than the context.Canceled
// the cut leaves, which would tell the caller its own context ended; err
// otherwise. A write keeps its error: it may have been sent.
func stoppedRead(ctx context.Context, req *http.Request, err error) error {
	if isWrite(req) || req.Context().Err() != nil || !errors.Is(context.Cause(ctx), errMemberStopped) {
		return err
	}
	return errMemberStopped
}

// readBody is the body of a read's answer: reading it fails with
// errMemberStopped when the member's stop cuts it (see stoppedRead).
type readBody struct {
	*releasingBody
	req *http.Request
	ctx context.Context
}

func (b *readBody) Read(p []byte) (int, error) {
	n, err := b.releasingBody.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = stoppedRead(b.ctx, b.req, err)
	}
	return n, err
}

// leanRoundTrip sends a request of an informer of the member's cache's
// Runner as informerRoundTrip does (as it is, its body closed when the
// lifetime ends): the request's own context is the informer's, which
// ends when the cache stops the informer, possibly after the member's
// Manager has returned, and a watch's stream must not outlive the member.
// The stream of a watch is handed to the informer, which reads it itself
// (leaninformer.TakeWatch).
func (t *lifetimeTransport) leanRoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.informerRoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp, _ = leaninformer.TakeWatch(req, resp)
	return resp, nil
}

func (t *lifetimeTransport) informerRoundTrip(req *http.Request) (*http.Response, error) {
	if t.lifetime.Err() != nil {
		return nil, errStoppedBeforeRequest
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body := resp.Body
	stop := context.AfterFunc(t.lifetime, func() { _ = body.Close() })
	resp.Body = &releasingBody{ReadCloser: body, release: func() { stop() }}
	return resp, nil
}

// writeRoundTrip sends a write that the member's stop does not cut before
// its grace: a write already sent when the lifetime ends gets up to the
// grace to receive its answer (the API server may have applied it, and only
// the answer tells the caller); one not sent yet is cut at once, and one
// made after the lifetime ended is refused. The Manager counts it as in
// flight until its body is closed, and stops only once none is (see
// writesInFlight.wait), so the member's connections outlive it.
func (t *lifetimeTransport) writeRoundTrip(req *http.Request) (*http.Response, error) {
	if t.lifetime.Err() != nil || !t.writes.add() {
		return nil, errStoppedBeforeRequest
	}
	ctx, w := writegrace.Start(req.Context(), t.lifetime, t.writes.grace, errStoppedBeforeRequest, errWriteGraceEnded)
	release := func() {
		w.Done()
		t.writes.done()
	}
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		release()
		return nil, err
	}
	resp.Body = &releasingBody{ReadCloser: resp.Body, release: release}
	return resp, nil
}

// isWrite reports whether req may change something on the API server:
// anything but a read.
func isWrite(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// writeGrace is how long a member's write already sent may wait for its
// answer once the member stops: the fan-out client's grace
// (client.DefaultWriteGrace), but never longer than the member's graceful
// shutdown timeout (given as in Options), which bounds its stop; with a
// timeout of zero ("do not wait") writes are cut with the member.
func writeGrace(shutdown *time.Duration) time.Duration {
	timeout, forever := ShutdownTimeout(shutdown)
	if forever {
		return client.DefaultWriteGrace
	}
	return min(timeout, client.DefaultWriteGrace)
}

// writesInFlight counts a member's writes that may still get their answer.
type writesInFlight struct {
	grace time.Duration

	mu     sync.Mutex
	n      int
	closed bool
	idle   chan struct{} // closed once closed and none is in flight
}

func newWritesInFlight(grace time.Duration) *writesInFlight {
	return &writesInFlight{grace: grace, idle: make(chan struct{})}
}

// add counts a write about to be sent; false once wait was called.
func (w *writesInFlight) add() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.n++
	return true
}

func (w *writesInFlight) done() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n--
	if w.n == 0 && w.closed {
		close(w.idle)
	}
}

// wait refuses writes from now on and returns once none is in flight, or
// after the grace: called once the member's lifetime has ended, by when
// every write still in flight is cut. A response body its caller never
// closes thus holds the member's stop for one grace at most. Nil waits for
// nothing.
func (w *writesInFlight) wait() {
	if w == nil {
		return
	}
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		if w.n == 0 {
			close(w.idle)
		}
	}
	w.mu.Unlock()
	t := time.NewTimer(w.grace)
	defer t.Stop()
	select {
	case <-w.idle:
	case <-t.C:
	}
}

// WrappedRoundTripper lets client-go's helpers see through the wrapper.
func (t *lifetimeTransport) WrappedRoundTripper() http.RoundTripper { return t.next }

type releasingBody struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}
