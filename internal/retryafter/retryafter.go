package retryafter

import (
	"net/http"
)

// Wrap returns rt, less the Retry-After header of every server error (5xx)
// that answers a write (any method but GET, HEAD and OPTIONS).
func Wrap(rt http.RoundTripper) http.RoundTripper { return &transport{rt: rt} }

type transport struct{ rt http.RoundTripper }

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	if err != nil || resp.StatusCode < http.StatusInternalServerError {
		return resp, err
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return resp, nil
	}
	if resp.Header.Get("Retry-After") != "" {
		resp.Header = resp.Header.Clone()
		resp.Header.Del("Retry-After")
	}
	return resp, nil
}

// WrappedRoundTripper returns the transport Wrap wrapped, as client-go's
// wrappers do, so that what looks through a chain of them finds it.
func (t *transport) WrappedRoundTripper() http.RoundTripper { return t.rt }
