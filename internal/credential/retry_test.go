package credential

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// execPlugin writes a client-go exec plugin (a shell script) that hands
// out the token in the returned file and logs each run; the config runs
// it for host.
func execPlugin(t *testing.T, host string) (cfg *rest.Config, token, runs string) {
	t.Helper()
	dir := t.TempDir()
	token, runs = filepath.Join(dir, "token"), filepath.Join(dir, "runs")
	script := filepath.Join(dir, "plugin")
	body := fmt.Sprintf("#!/bin/sh\necho run >> %q\nprintf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"%%s\"}}' \"$(cat %q)\"\n", runs, token)
	if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	// Each test its own command: client-go shares one authenticator per
	// exec config.
	return &rest.Config{Host: host, ExecProvider: &clientcmdapi.ExecConfig{
		Command: script, APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}}, token, runs
}

func writeToken(t *testing.T, path, tok string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
}

func countRuns(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Count(string(b), "run")
}

// client-go's exec authenticator runs its plugin again when a request is
// refused, and answers that request with the refusal: RetryRefused sends
// it once more, with the new credential, and the caller gets the answer
// to that. Without it the caller gets the 401.
func TestRetryRefusedSendsAgainAfterTheExecPluginRenewed(t *testing.T) {
	for _, retry := range []bool{true, false} {
		t.Run(fmt.Sprintf("retry=%v", retry), func(t *testing.T) {
			s := newAPIServer(t, bearer("one"))
			cfg, token, runs := execPlugin(t, s.URL)
			writeToken(t, token, "one")
			if !Refreshes(cfg) || Holdable(cfg) {
				t.Fatal("an exec config: refreshes, not held")
			}
			hc, err := rest.HTTPClientFor(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if retry {
				hc = &http.Client{Transport: RetryRefused(hc.Transport)}
			}
			if code := send(t, hc, s.URL, "a"); code != http.StatusOK {
				t.Fatalf("first: %d", code)
			}
			// Revoked, and reissued: the plugin hands out the new token.
			writeToken(t, token, "two")
			s.accept.Store(ptr(bearer("two")))
			code := send(t, hc, s.URL, "payload")
			sent, bodies := s.requests()
			if retry {
				if code != http.StatusOK || !equal(sent, []string{bearer("one"), bearer("one"), bearer("two")}) || bodies[2] != "payload" {
					t.Errorf("answered %d after sending %q (bodies %q); want 200 after one, one (refused), two", code, sent, bodies)
				}
			} else if code != http.StatusUnauthorized || len(sent) != 2 {
				t.Errorf("without RetryRefused: %d after %d requests; want the 401 after 2", code, len(sent))
			}
			if n := countRuns(t, runs); n != 2 {
				t.Errorf("plugin ran %d times, want 2 (start, refusal)", n)
			}
			// Revoked for good: one more request, refused, and no more.
			s.accept.Store(ptr(bearer("three")))
			if code := send(t, hc, s.URL, "x"); code != http.StatusUnauthorized {
				t.Errorf("revoked for good: %d", code)
			}
			want := 3
			if retry {
				want = 5
			}
			if sent, _ := s.requests(); len(sent) != want {
				t.Errorf("%d requests, want %d", len(sent), want)
			}
		})
	}
}

// A request whose body cannot be read again is sent once, unmarked.
func TestRetryRefusedLeavesABodyReadOnce(t *testing.T) {
	var marked []bool
	rt := RetryRefused(roundTripFunc(func(req *http.Request) (*http.Response, error) {
		marked = append(marked, Retries(req.Context()))
		return &http.Response{StatusCode: http.StatusUnauthorized, Body: io.NopCloser(strings.NewReader("no"))}, nil
	}))
	req, err := http.NewRequest(http.MethodPost, "http://x/", io.NopCloser(strings.NewReader("once")))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if len(marked) != 1 || marked[0] {
		t.Errorf("sent %d times, marked %v; want once, unmarked", len(marked), marked)
	}
	// With a body that reads again: marked first, then not.
	marked = nil
	req, err = http.NewRequest(http.MethodPost, "http://x/", strings.NewReader("again"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err = rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if len(marked) != 2 || !marked[0] || marked[1] {
		t.Errorf("marks %v, want [true false]", marked)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
