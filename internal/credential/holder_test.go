package credential

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// apiServer accepts one Authorization header at a time and records what
// it was sent.
type apiServer struct {
	*httptest.Server
	accept atomic.Pointer[string]
	// onRefuse, if set, runs before a refusal is answered: what happens
	// meanwhile elsewhere (a rotation).
	onRefuse func()

	mu     sync.Mutex
	sent   []string // Authorization headers, in order
	bodies []string
}

func newAPIServer(t *testing.T, accept string) *apiServer {
	s := &apiServer{}
	s.accept.Store(&accept)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		auth := r.Header.Get("Authorization")
		s.mu.Lock()
		s.sent = append(s.sent, auth)
		s.bodies = append(s.bodies, string(body))
		s.mu.Unlock()
		if auth != *s.accept.Load() {
			if s.onRefuse != nil {
				s.onRefuse()
			}
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *apiServer) requests() ([]string, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sent...), append([]string(nil), s.bodies...)
}

func bearer(tok string) string { return "Bearer " + tok }

// client installs h in a copy of cfg and returns a client built from it,
// as a member's are.
func client(t *testing.T, h *Holder, cfg *rest.Config) *http.Client {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	if err := h.Install(cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.BearerToken != "" || cfg.BearerTokenFile != "" || cfg.Username != "" || cfg.Password != "" {
		t.Fatal("Install left credentials in the config for client-go to send")
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return hc
}

func send(t *testing.T, hc *http.Client, url, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// A held token is sent; Set swaps another in for the next requests, and
// GetConfig's copy (Config) names it.
func TestHolderSendsAndSwaps(t *testing.T) {
	s := newAPIServer(t, bearer("one"))
	cfg := &rest.Config{Host: s.URL, BearerToken: "one"}
	h := New(cfg)
	hc := client(t, h, cfg)
	if code := send(t, hc, s.URL, "a"); code != http.StatusOK {
		t.Fatalf("with the held token: %d", code)
	}
	s.accept.Store(ptr(bearer("two")))
	if err := h.Set(&rest.Config{Host: s.URL, BearerToken: "two"}); err != nil {
		t.Fatal(err)
	}
	if code := send(t, hc, s.URL, "b"); code != http.StatusOK {
		t.Fatalf("after Set: %d", code)
	}
	if got := h.Config(&rest.Config{Host: s.URL}); got.BearerToken != "two" || got.Host != s.URL {
		t.Errorf("Config names token %q, want the one held now", got.BearerToken)
	}
	// Basic auth in place of the token.
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("user:pass"))
	s.accept.Store(&basic)
	if err := h.Set(&rest.Config{Host: s.URL, Username: "user", Password: "pass"}); err != nil {
		t.Fatal(err)
	}
	if code := send(t, hc, s.URL, "c"); code != http.StatusOK {
		t.Fatalf("with basic auth: %d", code)
	}
	sent, _ := s.requests()
	if want := []string{bearer("one"), bearer("two"), basic}; !equal(sent, want) {
		t.Errorf("sent %q, want %q", sent, want)
	}
}

// A request refused with credentials that Set replaced while it was in
// flight goes once more, body and all, with the new ones; one refused
// with the credentials held now is answered as it is (nothing new to
// send), and so is one whose body cannot be read again.
func TestHolderResendsOnlyWithNewCredentials(t *testing.T) {
	s := newAPIServer(t, bearer("two"))
	cfg := &rest.Config{Host: s.URL, BearerToken: "one"}
	h := New(cfg)
	var rotated atomic.Bool
	s.onRefuse = func() {
		if rotated.CompareAndSwap(false, true) {
			if err := h.Set(&rest.Config{Host: s.URL, BearerToken: "two"}); err != nil {
				t.Error(err)
			}
		}
	}
	hc := client(t, h, cfg)
	if code := send(t, hc, s.URL, "payload"); code != http.StatusOK {
		t.Fatalf("refused then rotated: %d, want the second request's 200", code)
	}
	sent, bodies := s.requests()
	if !equal(sent, []string{bearer("one"), bearer("two")}) || !equal(bodies, []string{"payload", "payload"}) {
		t.Errorf("sent %q with bodies %q; want the old token then the new, the body both times", sent, bodies)
	}

	s.accept.Store(ptr(bearer("three"))) // "two" revoked, nothing new held
	if code := send(t, hc, s.URL, "x"); code != http.StatusUnauthorized {
		t.Fatalf("refused with nothing new: %d, want 401", code)
	}
	if sent, _ := s.requests(); len(sent) != 3 {
		t.Errorf("%d requests, want 3: a refusal with nothing new to send is not sent again", len(sent))
	}

	// A body that cannot be read again: not resent, even with new
	// credentials.
	rotated.Store(false)
	s.onRefuse = func() {
		if rotated.CompareAndSwap(false, true) {
			_ = h.Set(&rest.Config{Host: s.URL, BearerToken: "three"})
		}
	}
	req, err := http.NewRequest(http.MethodPost, s.URL, io.NopCloser(strings.NewReader("once")))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a body read once: %d, want the 401 (not resent)", resp.StatusCode)
	}
	if sent, _ := s.requests(); len(sent) != 4 {
		t.Errorf("%d requests, want 4", len(sent))
	}
}

// A caller that gave up is not sent again.
func TestHolderDoesNotResendForACallerGone(t *testing.T) {
	s := newAPIServer(t, bearer("two"))
	cfg := &rest.Config{Host: s.URL, BearerToken: "one"}
	h := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	s.onRefuse = func() {
		_ = h.Set(&rest.Config{Host: s.URL, BearerToken: "two"})
		cancel()
	}
	hc := client(t, h, cfg)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := hc.Do(req); err == nil {
		_ = resp.Body.Close()
	}
	if sent, _ := s.requests(); len(sent) != 1 {
		t.Errorf("%d requests, want 1: the caller had gone", len(sent))
	}
}

// A token file is read again when a request is refused (client-go's own
// file source would send the old token for up to a minute), and the
// refused request goes once more with the new token.
func TestHolderReadsTheTokenFileAgainWhenRefused(t *testing.T) {
	s := newAPIServer(t, bearer("one"))
	path := filepath.Join(t.TempDir(), "token")
	write := func(tok string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("one")
	cfg := &rest.Config{Host: s.URL, BearerTokenFile: path}
	h := New(cfg)
	hc := client(t, h, cfg)
	if code := send(t, hc, s.URL, "a"); code != http.StatusOK {
		t.Fatalf("first: %d", code)
	}
	write("two")
	s.accept.Store(ptr(bearer("two")))
	if code := send(t, hc, s.URL, "b"); code != http.StatusOK {
		t.Fatalf("after the file was rewritten: %d, want 200 on the second request", code)
	}
	sent, _ := s.requests()
	if !equal(sent, []string{bearer("one"), bearer("one"), bearer("two")}) {
		t.Errorf("sent %q; want one, one (refused), two", sent)
	}
	if got := h.Config(&rest.Config{}).BearerTokenFile; got != path {
		t.Errorf("Config names token file %q, want %q", got, path)
	}
	// A file gone for a moment: the last token read goes on being sent.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	s.accept.Store(ptr(bearer("three")))
	if code := send(t, hc, s.URL, "c"); code != http.StatusUnauthorized {
		t.Fatalf("file gone: %d, want 401", code)
	}
	if sent, _ := s.requests(); sent[len(sent)-1] != bearer("two") {
		t.Errorf("file gone: sent %q, want the last token read", sent[len(sent)-1])
	}
}

// Install fails as client-go would build no client: a token and a
// username both, or a token file never read. Credentials that an exec
// plugin or auth provider supply are not held, and Set refuses them.
func TestHolderRefuses(t *testing.T) {
	if err := New(&rest.Config{BearerToken: "t", Username: "u"}).Install(&rest.Config{}); !errors.Is(err, errTokenAndBasic) {
		t.Errorf("token and username: %v", err)
	}
	err := New(&rest.Config{BearerTokenFile: filepath.Join(t.TempDir(), "missing")}).Install(&rest.Config{})
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing token file: %v, want an error naming it", err)
	}
	// A token to fall back on: client-go sends it.
	if err := New(&rest.Config{BearerToken: "t", BearerTokenFile: filepath.Join(t.TempDir(), "missing")}).Install(&rest.Config{}); err != nil {
		t.Errorf("missing token file with a token: %v", err)
	}
	execCfg := &rest.Config{ExecProvider: &clientcmdapi.ExecConfig{Command: "x", APIVersion: "client.authentication.k8s.io/v1"}}
	if New(execCfg) != nil || New(&rest.Config{AuthProvider: &clientcmdapi.AuthProviderConfig{Name: "x"}}) != nil {
		t.Error("credentials of a plugin held")
	}
	h := New(&rest.Config{BearerToken: "t"})
	if err := h.Set(execCfg); err == nil {
		t.Error("Set took an exec plugin")
	}
	if err := h.Set(&rest.Config{BearerToken: "t", Username: "u"}); err == nil {
		t.Error("Set took a token and a username")
	}
	if got := h.Config(&rest.Config{}).BearerToken; got != "t" {
		t.Errorf("after refused Sets, holds %q", got)
	}
	var none *Holder
	if err := none.Install(&rest.Config{BearerToken: "kept"}); err != nil {
		t.Error(err)
	}
}

// A request made from a copy of the member's config (GetConfig), which
// client-go stamps with the credentials it names, carries the Holder's
// current ones.
func TestHolderReplacesCopiedCredentials(t *testing.T) {
	s := newAPIServer(t, bearer("two"))
	cfg := &rest.Config{Host: s.URL, BearerToken: "one"}
	h := New(cfg)
	installed := rest.CopyConfig(cfg)
	if err := h.Install(installed); err != nil {
		t.Fatal(err)
	}
	copied := h.Config(installed) // names "one"
	if err := h.Set(&rest.Config{Host: s.URL, BearerToken: "two"}); err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(copied)
	if err != nil {
		t.Fatal(err)
	}
	if code := send(t, hc, s.URL, "x"); code != http.StatusOK {
		t.Errorf("a client of a copy made before Set: %d", code)
	}
}

// Set races requests: every request carries one whole set of credentials.
func TestHolderSetRacesRequests(t *testing.T) {
	tokens := []string{"a", "b", "c"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		for _, tok := range tokens {
			if auth == bearer(tok) {
				return
			}
		}
		http.Error(w, "bad header "+auth, http.StatusBadRequest)
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL, BearerToken: "a"}
	h := New(cfg)
	hc := client(t, h, cfg)
	stop := make(chan struct{})
	swapped := make(chan struct{})
	go func() {
		defer close(swapped)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = h.Set(&rest.Config{BearerToken: tokens[i%len(tokens)]})
		}
	}()
	var writers sync.WaitGroup
	for range 4 {
		writers.Go(func() {
			for range 50 {
				if code := send(t, hc, srv.URL, "x"); code != http.StatusOK {
					t.Errorf("answered %d", code)
					return
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	<-swapped
}

func ptr(s string) *string { return &s }

func equal(a, b []string) bool { return slices.Equal(a, b) }
