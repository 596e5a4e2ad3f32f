package credential

import (
	"encoding/base64"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
)

// Holdable reports whether a Holder can hold cfg's credentials: no exec
// plugin or auth provider supplies them. A config with neither is held
// even if it sends no header credentials at all (a client certificate
// alone): an update may give it a token.
func Holdable(cfg *rest.Config) bool {
	return cfg != nil && cfg.ExecProvider == nil && cfg.AuthProvider == nil
}

// Holder holds the header credentials of one member (a bearer token, a
// token file, or a username and password), for every start of it: the
// configs its starts are built from send what the Holder holds at the
// moment, and Set changes that while they run. A nil Holder holds nothing
// and installs nothing: the member's config keeps its own credentials.
type Holder struct {
	cur atomic.Pointer[held]
}

// held is one set of credentials; never changed once made.
type held struct {
	fields
	header string     // the Authorization header of a token or basic auth
	file   *fileToken // a token file, read again when refused
	err    error      // why client-go would refuse the set
}

// fields are the rest.Config fields held, as the config named them.
type fields struct{ token, tokenFile, username, password string }

func fieldsOf(cfg *rest.Config) fields {
	return fields{cfg.BearerToken, cfg.BearerTokenFile, cfg.Username, cfg.Password}
}

// errTokenAndBasic is client-go's refusal of a config with both.
var errTokenAndBasic = errors.New("username/password or bearer token may be set, but not both")

func hold(cfg *rest.Config) *held {
	h := &held{fields: fieldsOf(cfg)}
	hasToken := cfg.BearerToken != "" || cfg.BearerTokenFile != ""
	switch {
	case hasToken && cfg.Username != "":
		h.err = errTokenAndBasic
	case cfg.BearerTokenFile != "":
		// client-go's own file source caches the token for a minute and is
		// never told of a refusal; this one is, as client-go's are behind
		// transport.ResettableTokenSourceWrapTransport.
		h.file = &fileToken{src: transport.NewCachedFileTokenSource(cfg.BearerTokenFile)}
		if cfg.BearerToken != "" {
			h.file.last.Store(&cfg.BearerToken)
		}
	case cfg.BearerToken != "":
		h.header = "Bearer " + cfg.BearerToken
	case cfg.Username != "":
		h.header = "Basic " + base64.StdEncoding.EncodeToString([]byte(cfg.Username+":"+cfg.Password))
	}
	return h
}

// New returns a Holder of cfg's credentials, or nil when they are not
// Holdable.
func New(cfg *rest.Config) *Holder {
	if !Holdable(cfg) {
		return nil
	}
	h := &Holder{}
	h.cur.Store(hold(cfg))
	return h
}

// Set makes the Holder hold cfg's credentials from now on: requests sent
// after it carry them, and a request refused with the previous ones is
// sent once more with them. It fails, holding what it held, when cfg's
// credentials are not Holdable or client-go would refuse them (a token and
// a username both); the member must then be built anew.
func (h *Holder) Set(cfg *rest.Config) error {
	if h == nil || !Holdable(cfg) {
		return errors.New("credentials not held: an exec plugin or auth provider supplies them")
	}
	n := hold(cfg)
	if n.err != nil {
		return n.err
	}
	h.cur.Store(n)
	return nil
}

// Install makes every client built from cfg (one start's copy of the
// member's config) send the Holder's credentials: it takes cfg's own out,
// so that client-go sets none, and wraps cfg's transport. It fails as
// client-go would build no client from them: a token and a username both,
// or a token file that cannot be read (and no token to fall back on).
func (h *Holder) Install(cfg *rest.Config) error {
	if h == nil {
		return nil
	}
	c := h.cur.Load()
	if c.err != nil {
		return c.err
	}
	if c.file != nil {
		if _, err := c.file.authorization(); err != nil {
			return err
		}
	}
	cfg.BearerToken, cfg.BearerTokenFile, cfg.Username, cfg.Password = "", "", "", ""
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &roundTripper{h: h, next: rt} })
	return nil
}

// Config returns a copy of cfg (a config Install took the credentials out
// of) that names the credentials the Holder holds now: what the member's
// Manager tells as its config.
func (h *Holder) Config(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	if h == nil {
		return out
	}
	f := h.cur.Load().fields
	out.BearerToken, out.BearerTokenFile, out.Username, out.Password = f.token, f.tokenFile, f.username, f.password
	return out
}

// Credentials returns the credentials the Holder sends now: the token
// (a token file's last token read, too) and the password. For redaction:
// they are what an API server may echo. Nil for a nil Holder.
func (h *Holder) Credentials() []string {
	if h == nil {
		return nil
	}
	c := h.cur.Load()
	out := []string{c.token, c.password}
	if c.file != nil {
		if last := c.file.last.Load(); last != nil {
			out = append(out, *last)
		}
	}
	return out
}

// authorization is the Authorization header to send now ("" for none).
func (c *held) authorization() (string, error) {
	if c.file == nil {
		return c.header, nil
	}
	return c.file.authorization()
}

// renewed returns the Authorization header to send now, if it is not
// refused (the one a request was refused with).
func (c *held) renewed(refused string) (string, bool) {
	auth, err := c.authorization()
	return auth, err == nil && auth != refused
}

// refused tells the credentials that a request sent with them at begin
// was refused: a token file is read again before the next request.
func (c *held) refused(begin time.Time) {
	if c.file != nil {
		c.file.src.ResetTokenOlderThan(begin)
	}
}

// fileToken is a token file's current token.
type fileToken struct {
	src transport.ResettableTokenSource
	// last is the last token read (or the config's BearerToken before
	// that): sent while the file cannot be read, as client-go does — a
	// file being rewritten may be missing for a moment.
	last atomic.Pointer[string]
}

// authorization is the file's token as a header; the last token read
// when the file cannot be read, and the error only if none ever was
// (Install makes sure one was): never no credentials at all.
func (f *fileToken) authorization() (string, error) {
	tok, err := f.src.Token()
	if err == nil {
		if last := f.last.Load(); last == nil || *last != tok.AccessToken {
			f.last.Store(&tok.AccessToken)
		}
		return "Bearer " + tok.AccessToken, nil
	}
	if last := f.last.Load(); last != nil {
		return "Bearer " + *last, nil
	}
	return "", err
}

// roundTripper stamps each request with the Holder's credentials, and
// sends a refused one once more when the credentials to send have changed
// since (a token file rewritten, or Set).
type roundTripper struct {
	h    *Holder
	next http.RoundTripper
}

func (t *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	c := t.h.cur.Load()
	begin := time.Now()
	auth, err := c.authorization()
	if err != nil {
		closeBody(req)
		return nil, err
	}
	resp, err := t.next.RoundTrip(stamp(req, auth))
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	c.refused(begin)
	again, renewed := t.h.cur.Load().renewed(auth)
	if !renewed {
		return resp, nil // nothing new to send: the refusal is the answer
	}
	next, ok := resend(req)
	if !ok {
		return resp, nil
	}
	discard(resp)
	return t.next.RoundTrip(stamp(next, again))
}

// WrappedRoundTripper lets client-go's helpers see through the wrapper.
func (t *roundTripper) WrappedRoundTripper() http.RoundTripper { return t.next }

// closeBody closes the body of a request not sent, as a RoundTripper
// must.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// stamp returns req carrying auth as its Authorization header (none for
// ""), a copy when that changes anything: a config copied from the
// member's (Config) may have client-go set the credentials it was copied
// with, which the Holder's current ones replace.
func stamp(req *http.Request, auth string) *http.Request {
	if req.Header.Get("Authorization") == auth {
		return req
	}
	req = req.Clone(req.Context())
	if auth == "" {
		req.Header.Del("Authorization")
	} else {
		req.Header.Set("Authorization", auth)
	}
	return req
}
