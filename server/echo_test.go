package server_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// hugeStatus is an API server's Status answer whose message is 4 MiB and
// ends with the credential.
func hugeStatus(credential string) string {
	return `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"InternalError","code":500,"message":"` + strings.Repeat("<", 4<<20) + ` token ` + credential + `"}`
}

// A member's API server (or a proxy before it) that echoes the credential
// a request carried, in whatever shape, gets it into no Status, log line
// or fleet page; and one that answers with megabytes gets a message cut
// to config.MaxErrorMessage kept and shown.
func TestMemberErrorsCarryNoEchoedCredential(t *testing.T) {
	ns := testNamespace(t)
	addr := test.FreeAddress(t)
	var mu sync.Mutex
	var logs strings.Builder
	r := startServer(t, ns, func(o *ctrl.Options) {
		o.Metrics = metricsserver.Options{BindAddress: addr}
		o.Logger = funcr.New(func(prefix, args string) {
			mu.Lock()
			defer mu.Unlock()
			logs.WriteString(prefix + " " + args + "\n")
		}, funcr.Options{})
	}, func(o *server.Options) {
		o.FleetPage = true
		o.Backoff = wait.Backoff{Duration: 1 << 40, Cap: 1 << 40}
	})
	echo := func(shape func(credential string) string) string {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/api/v1" && r.Header.Get("Authorization") == "Bearer list-credential-Vb6Gj3" {
				// The list member's discovery answers: it fails listing.
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"v1","resources":[{"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap","verbs":["get","list","watch"]}]}`)
				return
			}
			body := shape(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
			w.Header().Set("Content-Type", "text/plain")
			if strings.HasPrefix(body, `{"kind":"Status"`) {
				w.Header().Set("Content-Type", "application/json")
			}
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, body)
		}))
		t.Cleanup(hs.Close)
		return hs.URL
	}
	bare := func(c string) string { return c + " is not valid here" }
	type member struct {
		token string
		shape func(string) string
		file  bool // the token in a token file
	}
	members := map[string]member{
		"phrase": {token: "opaque-credential-7Hq2vX9kLm", shape: func(c string) string { return "invalid token " + c }},
		"json":   {token: "json-credential-Qm3Zr8", shape: func(c string) string { return `{"bearerToken":"` + c + `"}` }},
		"bare":   {token: "bare-credential-Wx4Ty9", shape: bare},
		"file":   {token: "file-credential-Rt5Mn8", shape: bare, file: true},
		"huge":   {token: "huge-credential-Lp2Nb5", shape: func(c string) string { return strings.Repeat("<", 4<<20) + c }},
		// The API server's own error shape, its message megabytes long,
		// in answer to discovery, and to the lists of a member whose
		// discovery answered (it stays Syncing, its watch error kept).
		"status": {token: "status-credential-Hd7Kc1", shape: hugeStatus},
		"list":   {token: "list-credential-Vb6Gj3", shape: hugeStatus},
	}
	for name, m := range members {
		cfg := &rest.Config{Host: echo(m.shape), BearerToken: m.token}
		if m.file {
			cfg.BearerToken, cfg.BearerTokenFile = "", filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(cfg.BearerTokenFile, []byte(m.token), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.srv.Add(config.NewNamedConfig(name, cfg)); err != nil {
			t.Fatal(err)
		}
	}
	for name := range members {
		if name == "list" {
			test.Eventually(t, 30*time.Second, "the list member's watch error kept", func() bool {
				st, err := r.srv.Status(name)
				return err == nil && st.LastError != nil
			})
			continue
		}
		waitPhase(t, r.srv, name, server.PhaseFailed)
	}
	res, err := http.Get("http://" + addr + "/fleetz")
	if err != nil {
		t.Fatal(err)
	}
	page, err := io.ReadAll(res.Body)
	if err := errors.Join(err, res.Body.Close()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	logged := logs.String()
	mu.Unlock()
	for name, m := range members {
		st, err := r.srv.Status(name)
		if err != nil || st.LastError == nil {
			t.Fatalf("%s: Status %+v, %v: want its last error", name, st, err)
		}
		msg := st.LastError.Error()
		for what, s := range map[string]string{"Status": msg, "the fleet page": string(page), "the logs": logged} {
			if strings.Contains(s, m.token) {
				t.Errorf("%s: %s carries the credential its API server echoed", name, what)
			}
		}
		if len(msg) > config.MaxErrorMessage+64 {
			t.Errorf("%s: Status keeps a message of %d bytes", name, len(msg))
		}
	}
	if len(page) > 1<<20 {
		t.Errorf("the fleet page of %d members is %d bytes", len(members), len(page))
	}
}
