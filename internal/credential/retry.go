package credential

import (
	"context"
	"io"
	"net/http"

	"k8s.io/client-go/rest"
)

// Refreshes reports whether cfg's credentials come from an exec plugin,
// which client-go runs again when a request is refused: the clients built
// from cfg need RetryRefused to send that request once more.
func Refreshes(cfg *rest.Config) bool {
	return cfg != nil && cfg.ExecProvider != nil
}

// RetryRefused returns next (a client's whole transport, client-go's
// authentication included) sending a request refused with 401 once more.
// client-go's exec authenticator, on that refusal, has run its plugin
// again by the time the answer comes back here, so the second request
// carries the plugin's new credential. The first carries a mark (Retries),
// as its refusal is not the last word.
func RetryRefused(next http.RoundTripper) http.RoundTripper {
	return &retryRefused{next: next}
}

type retryRefused struct{ next http.RoundTripper }

func (t *retryRefused) RoundTrip(req *http.Request) (*http.Response, error) {
	if !resendable(req) {
		return t.next.RoundTrip(req)
	}
	// A copy, headers included: the exec authenticator sets its
	// credential on the request it is handed, and the second request must
	// get the new one.
	resp, err := t.next.RoundTrip(req.Clone(context.WithValue(req.Context(), retryKey{}, true)))
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	next, ok := resend(req)
	if !ok {
		return resp, nil
	}
	discard(resp)
	return t.next.RoundTrip(next)
}

// WrappedRoundTripper lets client-go's helpers see through the wrapper.
func (t *retryRefused) WrappedRoundTripper() http.RoundTripper { return t.next }

type retryKey struct{}

// Retries reports whether a request of ctx that is refused will be sent
// once more (RetryRefused's first request), with a fresh credential.
func Retries(ctx context.Context) bool {
	v, _ := ctx.Value(retryKey{}).(bool)
	return v
}

// resendable reports whether req can be sent again: its body, if any, can
// be read anew.
func resendable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// resend returns a copy of req to send again, or false when it must not
// be: its caller gave up, or its body cannot be read anew.
func resend(req *http.Request) (*http.Request, bool) {
	if req.Context().Err() != nil || !resendable(req) {
		return nil, false
	}
	next := req.Clone(req.Context())
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, false
		}
		next.Body = body
	}
	return next, true
}

// maxDiscard bounds what is read of a refusal's body before it is closed
// (a Status of a few hundred bytes), so that its connection can be reused.
const maxDiscard = 64 << 10

func discard(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDiscard))
	_ = resp.Body.Close()
}
