package reach

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/mccr-dev/mccr/internal/leakcheck"
)

// restProbe is how a probe asked before it went to the member's transport
// directly: a REST client's GET /version, no retries. The probe must tell
// what it told, and send what it sent.
func restProbe(ctx context.Context, m *Monitor, rc *rest.RESTClient) (res Result, ok bool) {
	pctx, cancel := context.WithTimeout(ctx, m.o.Timeout)
	defer cancel()
	err := rc.Get().AbsPath("/version").MaxRetries(0).SetHeader("Accept", "application/json").Do(pctx).Error()
	if ctx.Err() != nil {
		return Result{}, false
	}
	var status apierrors.APIStatus
	switch {
	case err == nil:
	case errors.As(err, &status) && status.Status().Code > 0 && status.Status().Code < 500:
		res.refused = status.Status().Code == http.StatusUnauthorized
	case pctx.Err() != nil:
		res.Err = fmt.Errorf("API server %s did not answer within %s: %w", m.host, m.o.Timeout, ErrNoAnswer)
	default:
		res.Err = fmt.Errorf("API server %s unreachable: %w", m.host, err)
	}
	return res, true
}

// verdict is what a probe's outcome tells a Monitor.
func verdict(res Result, ok bool) string {
	switch {
	case !ok:
		return "cancelled"
	case res.Err == nil && res.refused:
		return "refused"
	case res.Err == nil:
		return "answered"
	case errors.Is(res.Err, ErrNoAnswer):
		return "no answer"
	}
	return "unreachable"
}

// recorder notes what reaches an API server: every request, as the
// server sees it.
type recorder struct {
	mu   sync.Mutex
	seen []string
}

func (r *recorder) wrap(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		u, p, _ := req.BasicAuth()
		r.mu.Lock()
		r.seen = append(r.seen, fmt.Sprintf("%s %s %s?%s accept=%q agent=%q auth=%q basic=%q:%q impersonate=%q",
			req.Proto, req.Method, req.URL.Path, req.URL.RawQuery, req.Header.Get("Accept"), req.Header.Get("User-Agent"),
			req.Header.Get("Authorization"), u, p, req.Header.Get("Impersonate-User")))
		r.mu.Unlock()
		h(w, req)
	})
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.seen
	r.seen = nil
	return s
}

func version(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"major":"1","minor":"37"}`)
}

func status(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

// TestProbeTellsWhatARESTClientTold: for every kind of answer an API
// server or a proxy in front of it may give, and every config field that
// shapes a request, the probe sends the same request as the REST client
// it replaced (path, query, headers through the member's transport) and
// reaches the same verdict; and neither error shows a password of the
// host's URL.
func TestProbeTellsWhatARESTClientTold(t *testing.T) {
	leakcheck.Cleanup(t)
	stop := make(chan struct{})
	defer close(stop)
	cases := []struct {
		name    string
		handler http.HandlerFunc
		tls     bool
		ipv6    bool
		cfg     func(c *rest.Config, url string)
		want    string
		// rest is a REST client's verdict where it differs: it went by
		// the code in a Status body, the probe by the answer's status.
		rest string
	}{
		{name: "version", handler: version, want: "answered"},
		{name: "below a proxy's path", handler: version, cfg: func(c *rest.Config, u string) { c.Host = u + "/k8s/clusters/c-1" }, want: "answered"},
		{name: "below a path with a trailing slash", handler: version, cfg: func(c *rest.Config, u string) { c.Host = u + "/k8s/clusters/c-1/" }, want: "answered"},
		{name: "host without a scheme", handler: version, cfg: func(c *rest.Config, u string) { c.Host = strings.TrimPrefix(u, "http://") }, want: "answered"},
		{name: "IPv6", handler: version, ipv6: true, want: "answered"},
		{name: "APIPath", handler: version, cfg: func(c *rest.Config, _ string) { c.APIPath = "/custom" }, want: "answered"},
		{name: "client timeout", handler: version, cfg: func(c *rest.Config, _ string) { c.Timeout = 7 * time.Second }, want: "answered"},
		{name: "headers of the transport", handler: version, cfg: func(c *rest.Config, _ string) {
			c.UserAgent, c.BearerToken = "fleet-agent/1", "tok"
			c.Impersonate.UserName = "alice"
		}, want: "answered"},
		{name: "basic auth", handler: version, cfg: func(c *rest.Config, _ string) { c.Username, c.Password = "u", "pw" }, want: "answered"},
		{name: "HTTP/2", handler: version, tls: true, want: "answered"},
		{name: "redirect", handler: func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/version" {
				http.Redirect(w, r, "/elsewhere", http.StatusFound)
				return
			}
			version(w, r)
		}, want: "answered"},
		{name: "redirect loop", handler: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/version", http.StatusFound)
		}, want: "unreachable"},
		{name: "304 without a location", handler: status(http.StatusNotModified, ""), want: "answered"},
		{name: "401 Status", handler: status(401, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`), want: "refused"},
		{name: "401 text", handler: status(401, `Unauthorized`), want: "refused"},
		{name: "403", handler: status(403, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`), want: "answered"},
		{name: "404 Status without a code", handler: status(404, `{"kind":"Status","apiVersion":"v1","status":"Failure"}`), want: "answered", rest: "unreachable"},
		{name: "502 Status with a 404 code", handler: status(502, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":404}`), want: "unreachable", rest: "answered"},
		{name: "404 page", handler: status(404, `<html>not here</html>`), want: "answered"},
		{name: "429 Retry-After", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "1")
			status(429, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429}`)(w, r)
		}, want: "answered"},
		{name: "500", handler: status(500, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":500}`), want: "unreachable"},
		{name: "502 text", handler: status(502, `no backend`), want: "unreachable"},
		{name: "503 Retry-After", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "1")
			status(503, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":503}`)(w, r)
		}, want: "unreachable"},
		{name: "large answer", handler: func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, `{"major":"1","pad":"`+strings.Repeat("x", 3*maxProbeAnswer)+`"}`)
		}, want: "answered"},
		{name: "connection closed", handler: func(w http.ResponseWriter, _ *http.Request) {
			c, _, _ := w.(http.Hijacker).Hijack()
			_ = c.Close()
		}, cfg: func(c *rest.Config, u string) { c.Host = strings.Replace(u, "://", "://user:s3cret@", 1) }, want: "unreachable"},
		{name: "headers only", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"major":`)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-stop:
			}
		}, want: "no answer"},
		{name: "no answer", handler: func(_ http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-stop:
			}
		}, want: "no answer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var rec recorder
			s := httptest.NewUnstartedServer(rec.wrap(tc.handler))
			if tc.ipv6 {
				l, err := net.Listen("tcp", "[::1]:0")
				if err != nil {
					t.Fatal(err)
				}
				_ = s.Listener.Close()
				s.Listener = l
			}
			if tc.tls {
				s.EnableHTTP2 = true
				s.StartTLS()
			} else {
				s.Start()
			}
			defer s.Close()
			tr := s.Client().Transport.(*http.Transport)
			defer tr.CloseIdleConnections()
			cfg := &rest.Config{Host: s.URL, Transport: tr, QPS: -1}
			if tc.cfg != nil {
				tc.cfg(cfg, s.URL)
			}
			// A probe that is to get no answer waits its whole timeout;
			// the others must not find a loaded machine slower than it.
			timeout := 5 * time.Second
			if tc.want == "no answer" {
				timeout = 300 * time.Millisecond
			}
			m, err := New(cfg, Options{Timeout: timeout}, newEvents())
			if err != nil {
				t.Fatal(err)
			}
			rc, err := restClient(cfg, m.HTTPClient())
			if err != nil {
				t.Fatal(err)
			}

			res, ok := m.probe(context.Background())
			got, sent := verdict(res, ok), rec.take()
			old, oldOK := restProbe(context.Background(), m, rc)
			was, wasSent := verdict(old, oldOK), rec.take()
			wantRest := tc.want
			if tc.rest != "" {
				wantRest = tc.rest
			}
			if got != tc.want || was != wantRest {
				t.Errorf("verdict %q (%v), a REST client's %q (%v); want %q, %q", got, res.Err, was, old.Err, tc.want, wantRest)
			}
			if strings.Join(sent, "\n") != strings.Join(wasSent, "\n") {
				t.Errorf("the probe sent\n\t%s\na REST client sent\n\t%s", strings.Join(sent, "\n\t"), strings.Join(wasSent, "\n\t"))
			}
			if len(sent) == 0 {
				t.Error("nothing reached the API server")
			}
			for _, err := range []error{res.Err, old.Err} {
				if err != nil && strings.Contains(err.Error(), "s3cret") {
					t.Errorf("error shows the host's password: %v", err)
				}
			}
			t.Logf("sent %q, %s: %v", sent, got, res.Err)
		})
	}
}

// TestProbeOfARenewedExecCredential: a probe refused (401) with an exec
// plugin's expired credential goes once more with the one the plugin
// gives next, through the member's transport: the probe is answered, and
// the refusal of its first request is not told.
func TestProbeOfARenewedExecCredential(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newAuthServer(t, "one")
	dir := t.TempDir()
	token, script := filepath.Join(dir, "token"), filepath.Join(dir, "plugin")
	if err := os.WriteFile(script, []byte(fmt.Sprintf("#!/bin/sh\nprintf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"%%s\"}}' \"$(cat %q)\"\n", token)), 0o700); err != nil {
		t.Fatal(err)
	}
	hand := func(tok string) {
		if err := os.WriteFile(token, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	hand("one")
	// client-go's own transport (an exec plugin may hand out client
	// certificates, which a transport of the config's would not send); the
	// server's Close ends its connections.
	cfg := &rest.Config{Host: s.URL, QPS: -1, ExecProvider: &clientcmdapi.ExecConfig{
		Command: script, APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}}
	ev := newCredEvents()
	m, err := New(cfg, Options{Timeout: 5 * time.Second}, ev)
	if err != nil {
		t.Fatal(err)
	}
	if res, ok := m.probe(context.Background()); verdict(res, ok) != "answered" {
		t.Fatalf("probe with the plugin's credential: %s (%v)", verdict(res, ok), res.Err)
	}
	// Revoked, and reissued: the plugin hands out the new one.
	s.accept.Store(ptr("two"))
	hand("two")
	before := s.probes.Load()
	if res, ok := m.probe(context.Background()); verdict(res, ok) != "answered" {
		t.Errorf("probe with a renewed credential: %s (%v); want answered", verdict(res, ok), res.Err)
	}
	if n := s.probes.Load() - before; n != 2 {
		t.Errorf("probe sent %d requests, want 2 (refused, then with the new credential)", n)
	}
	if refused, _, rejected := ev.counts(); refused != 0 || rejected != 0 {
		t.Errorf("told refused %d, rejected %d times; want neither", refused, rejected)
	}
}
