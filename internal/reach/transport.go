package reach

import (
	"bytes"
	"io"
	"net/http"
	"strings"

	"github.com/mccr-dev/mccr/internal/credential"
)

// transport reports transport errors (no answer at all, as opposed to an
// error answer) of requests that were not cancelled by their caller, and
// answers that reject the identity: a 401 anywhere (refused credentials),
// or a 403 on discovery, which every authenticated user may read (an
// identity rejected). A 403 elsewhere is one request the user's RBAC
// forbids, which says nothing about the member.
//
// A 401 to a request that will be sent once more with a fresh credential
// (credential.Retries: its exec plugin runs again) is not reported: the
// second request's answer is. A Holder's credentials (internal/credential)
// are refreshed below this transport, which sees only the last answer.
//
// client-go retries a refused or reset connection without telling anyone,
// and open watches outlive revoked credentials for minutes: this is where
// the member hears of both.
type transport struct {
	next       http.RoundTripper
	onError    func(error)
	onRefused  func(*http.Request, int)
	onRejected func(*http.Request, int)
}

func (r *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	switch {
	case err != nil && req.Context().Err() == nil:
		r.onError(err)
	case err != nil:
	case resp.StatusCode == http.StatusUnauthorized && credential.Retries(req.Context()):
	case resp.StatusCode == http.StatusUnauthorized:
		// The member may stop on a refusal, and its requests end with it:
		// the caller gets the API server's answer read before that, not
		// the cancellation of its read.
		resp.Body = readRejection(resp.Body)
		r.onRefused(req, resp.StatusCode)
	case resp.StatusCode == http.StatusForbidden && isDiscovery(req.URL.Path):
		resp.Body = readRejection(resp.Body)
		r.onRejected(req, resp.StatusCode)
	}
	return resp, err
}

// WrappedRoundTripper lets client-go's helpers (closing idle connections)
// see through the wrapper.
func (r *transport) WrappedRoundTripper() http.RoundTripper { return r.next }

// maxRejectionBody bounds what is read of a rejection's body (a Status).
const maxRejectionBody = 64 << 10

// readRejection reads and closes body, and returns what it held.
func readRejection(body io.ReadCloser) io.ReadCloser {
	b, _ := io.ReadAll(io.LimitReader(body, maxRejectionBody))
	_ = body.Close()
	return io.NopCloser(bytes.NewReader(b))
}

// isDiscovery reports whether path is a discovery document: /api, /apis,
// /api/v1, /apis/<group> or /apis/<group>/<version>.
func isDiscovery(path string) bool {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch parts[0] {
	case "api":
		return len(parts) <= 2
	case "apis":
		return len(parts) <= 3
	}
	return false
}
