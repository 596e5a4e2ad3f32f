package member

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/internal/syncinformer"
)

// discoveryTimeout bounds each discovery request of a member's REST
// mapper. The mapper (leanmapper's, or controller-runtime's) asks for
// discovery with no context, and through the cache while the informer
// map's lock is held (controller-runtime's also holds its own):
// against an API server that accepts connections and never answers, one
// such request would otherwise block the member for good.
const discoveryTimeout = 30 * time.Second

// httpClients returns the HTTP client a member's cache and client use,
// whose every request also ends when lifetime does (see lifetimeTransport
// for the informers' requests; and whose watches are
// uncompressed unless compressWatches), and the one for its
// REST mapper. The mapper may be shared with other members of the same API
// server and identity, so it must not die with this one: its requests are
// bounded by discoveryTimeout instead.
func httpClients(lifetime context.Context, cfg *rest.Config, compressWatches bool) (member, mapper *http.Client, err error) {
	base, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	rt := base.Transport
	if rt == nil { // client-go's http.DefaultClient: no TLS, no wrappers
		rt = http.DefaultTransport
	}
	memberRT := rt
	if !compressWatches {
		memberRT = plainWatches{rt}
	}
	member = &http.Client{Transport: &lifetimeTransport{next: memberRT, lifetime: lifetime}, Timeout: base.Timeout, Jar: base.Jar}
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
// request's own context.
//
// The requests of the cache's informers keep their own context, which ends
// when the informer stops (see syncinformer.InformerRun): a context derived
// from it would cost a goroutine per request. Their bodies (a watch's
// stream) are closed when the lifetime ends, and once it has ended they are
// refused; a request of theirs still waiting for its answer then ends when
// the informer stops, which the member's cache does before its Manager's
// Start returns.
// errStoppedBeforeRequest refuses an informer's request made once the
// member's lifetime has ended.
var errStoppedBeforeRequest = errors.New("member cluster stopped: request not sent")

type lifetimeTransport struct {
	next     http.RoundTripper
	lifetime context.Context
}

func (t *lifetimeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if syncinformer.InformerRun(req.Context()) {
		return t.informerRoundTrip(req)
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	stop := context.AfterFunc(t.lifetime, func() { cancel(errMemberStopped) })
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		stop()
		cancel(nil)
		return nil, err
	}
	resp.Body = &releasingBody{ReadCloser: resp.Body, release: func() { stop(); cancel(nil) }}
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
