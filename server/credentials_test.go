package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/conntrack"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// The fleet cluster this file's members reach, and how long their
// credentials may stay refused before they fail (one ReachProbeInterval).
const (
	credCluster = "m2"
	credGrace   = 2 * time.Second
)

// credOptions: quick retries, and credGrace.
func credOptions(o *server.Options) {
	o.Backoff.Duration = 100 * time.Millisecond
	o.Backoff.Cap = time.Second
	o.ReachProbeInterval = credGrace
	o.OutageProbeInterval = 100 * time.Millisecond
}

// wire sees a member's requests as they are sent: the member config's own
// WrapTransport is the innermost of its transports, under everything mccr
// adds, so a refused request and the one sent again after it are two. It
// can also drop the member's watch streams, as a lost connection would.
type wire struct {
	mu      sync.Mutex
	armed   bool
	seen    wireState
	streams map[*stream]bool // open watch streams
}

// wireState is what a wire saw.
type wireState struct {
	relists  int       // ConfigMap lists, and watches that begin with a list
	watches  int       // ConfigMap watches opened
	refusals int       // since armed
	refused  time.Time // the first refusal once armed
	accepted time.Time // the first success after it
}

func (w *wire) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		w.record(req, resp, err)
		return resp, err
	})
}

func (w *wire) record(req *http.Request, resp *http.Response, err error) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	q := req.URL.Query()
	if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/configmaps") {
		watch := q.Get("watch") == "true"
		if !watch || q.Get("sendInitialEvents") == "true" {
			w.seen.relists++
		}
		if watch && err == nil && resp.StatusCode == http.StatusOK {
			w.seen.watches++
			if w.streams == nil {
				w.streams = map[*stream]bool{}
			}
			s := &stream{ReadCloser: resp.Body, w: w}
			w.streams[s] = true
			resp.Body = s
		}
	}
	switch {
	case err != nil || !w.armed:
	case resp.StatusCode == http.StatusUnauthorized:
		w.seen.refusals++
		if w.seen.refused.IsZero() {
			w.seen.refused = now
		}
	case resp.StatusCode < 300 && !w.seen.refused.IsZero() && w.seen.accepted.IsZero():
		w.seen.accepted = now
	}
}

// arm starts counting refusals afresh.
func (w *wire) arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = true
	w.seen = wireState{relists: w.seen.relists}
}

func (w *wire) state() wireState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen
}

// drop ends the member's open ConfigMap watches as a lost connection
// does: their readers see the stream end (EOF), and the informer opens
// them again from where it was, without a list, if it can.
func (w *wire) drop(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	streams := make([]*stream, 0, len(w.streams))
	for s := range w.streams {
		streams = append(streams, s)
	}
	w.mu.Unlock()
	if len(streams) == 0 {
		t.Fatal("no watch stream open to drop")
	}
	for _, s := range streams {
		s.drop()
	}
}

// stream is a watch's body, which drop ends.
type stream struct {
	io.ReadCloser
	w       *wire
	dropped atomic.Bool
}

func (s *stream) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	if err != nil && s.dropped.Load() {
		err = io.EOF
	}
	return n, err
}

func (s *stream) drop() {
	s.dropped.Store(true)
	_ = s.Close()
}

func (s *stream) Close() error {
	s.w.mu.Lock()
	delete(s.w.streams, s)
	s.w.mu.Unlock()
	return s.ReadCloser.Close()
}

// gap is how long after the first refusal the first success came; it
// fails the test when either does not happen. (The success may be seen
// here a moment after its effect is seen on the API server.)
func (w *wire) gap(t *testing.T) time.Duration {
	t.Helper()
	var st wireState
	test.Eventually(t, 10*time.Second, "a refusal followed by a success at the wire", func() bool {
		st = w.state()
		return !st.refused.IsZero() && !st.accepted.IsZero()
	})
	return st.accepted.Sub(st.refused)
}

// credMember is a member of credCluster reached with nothing but its
// address, CA and what cred sets, its requests seen by w.
func credMember(name string, w *wire, cred func(*rest.Config)) *config.NamedConfig {
	admin := fleet.Cluster(credCluster).Config
	cfg := &rest.Config{Host: admin.Host, TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData}, WrapTransport: w.wrap}
	cred(cfg)
	return config.NewNamedConfig(name, cfg)
}

// mint returns a new token of a new cluster-admin ServiceAccount sa in ns.
func mint(t *testing.T, ns, sa string) string {
	t.Helper()
	tok, err := test.ServiceAccountToken(context.Background(), fleet.Cluster(credCluster).Config, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// tokenAnswer is credCluster's answer to /api asked with tok alone.
func tokenAnswer(t *testing.T, tok string) error {
	t.Helper()
	cfg, conns := conntrack.Wrap(test.TokenConfig(fleet.Cluster(credCluster).Config, tok))
	defer conns.Close()
	cfg.NegotiatedSerializer = serializer.WithoutConversionCodecFactory{CodecFactory: scheme.Codecs}
	rc, err := rest.UnversionedRESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rc.Get().AbsPath("/api").Do(context.Background()).Error()
}

// revoke deletes sa, which revokes its tokens, and returns once the API
// server refuses tok.
func revoke(t *testing.T, ns, sa, tok string) {
	t.Helper()
	if err := test.DeleteServiceAccount(context.Background(), fleet.Cluster(credCluster).Config, ns, sa); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 30*time.Second, "token of "+sa+" refused", func() bool { return apierrors.IsUnauthorized(tokenAnswer(t, tok)) })
}

// execPlugin is a client-go exec plugin (a shell script) handing out the
// token last given to hand; while slow is set, it takes two seconds.
type execPlugin struct{ dir string }

func newExecPlugin(t *testing.T) *execPlugin {
	t.Helper()
	p := &execPlugin{dir: t.TempDir()}
	script := fmt.Sprintf(`#!/bin/sh
echo started >> %[1]s/runs
[ -e %[1]s/slow ] && sleep 2
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%%s"}}' "$(cat %[1]s/token)"
`, p.dir)
	if err := os.WriteFile(filepath.Join(p.dir, "plugin"), []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *execPlugin) set(cfg *rest.Config) {
	// A command of its own per test: client-go shares one authenticator
	// (and its cached credential) per exec config.
	cfg.ExecProvider = &clientcmdapi.ExecConfig{Command: filepath.Join(p.dir, "plugin"), APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
}

func (p *execPlugin) hand(t *testing.T, tok string) {
	t.Helper()
	writeAtomically(t, filepath.Join(p.dir, "token"), tok)
}

func (p *execPlugin) slow(t *testing.T) {
	t.Helper()
	writeAtomically(t, filepath.Join(p.dir, "slow"), "")
}

func (p *execPlugin) runs(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.dir, "runs"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Count(string(b), "started")
}

func writeAtomically(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// write creates ConfigMap obj in the member through the fan-out client:
// the caller gets the answer to its request, whatever happened below.
func write(t *testing.T, srv *server.Server, name, ns, obj string) error {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: obj, Namespace: ns}}
	return srv.GetClient().Create(known.WithCluster(context.Background(), name), cm)
}

// reconciled creates ConfigMap obj in credCluster and returns how long the
// member took to reconcile it: its ack is written with the member's
// credentials.
func reconciled(t *testing.T, name, ns, obj string) time.Duration {
	t.Helper()
	begin := time.Now()
	createConfigMap(t, credCluster, ns, obj)
	test.Eventually(t, 30*time.Second, obj+" reconciled by "+name, func() bool { return ackIn(t, credCluster, ns, obj) == name })
	return time.Since(begin)
}

// watchesAgain drops the member's watches: each is opened again, without
// a list (steady checks that), with credentials that work, and the member
// sees what changes after that.
func watchesAgain(t *testing.T, w *wire, name, ns string) {
	t.Helper()
	opened := w.state().watches
	w.drop(t)
	test.Eventually(t, 30*time.Second, "the dropped watch opened again", func() bool { return w.state().watches > opened })
	reconciled(t, name, ns, "watched-again")
}

// steady checks, for a while longer than credGrace, that the member stays
// Ready without a restart or failure, and never lists its ConfigMaps again.
func steady(t *testing.T, srv *server.Server, name string, w *wire, relists int) {
	t.Helper()
	check := func() {
		t.Helper()
		st, err := srv.Status(name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Phase != server.PhaseReady || st.Restarts != 0 || st.Failures != 0 {
			t.Fatalf("%s is %s with %d restarts, %d failures (last error %v); want Ready, never restarted", name, st.Phase, st.Restarts, st.Failures, st.LastError)
		}
		if n := w.state().relists; n != relists {
			t.Fatalf("%s listed its ConfigMaps %d times more: its caches were relisted", name, n-relists)
		}
	}
	for until := time.Now().Add(credGrace + 2*time.Second); time.Now().Before(until); time.Sleep(50 * time.Millisecond) {
		check()
	}
	check()
}

// An exec plugin's credential is revoked, and the plugin hands out a new
// one: the member's first refused request makes client-go run the plugin
// again, and is sent once more with the new credential. The member is
// neither restarted nor relisted, and reconciles on.
func TestCredExecRenewedInPlace(t *testing.T) {
	ns := testNamespace(t)
	const name = "cred-exec"
	w := &wire{}
	p := newExecPlugin(t)
	tok1 := mint(t, ns, "exec-1")
	p.hand(t, tok1)
	r := startServer(t, ns, nil, credOptions)
	if err := r.srv.Add(credMember(name, w, p.set)); err != nil {
		t.Fatal(err)
	}
	waitReady(t, r.srv, name)
	reconciled(t, name, ns, "before")
	relists := w.state().relists
	runs := p.runs(t)

	// Reissued, then revoked. The next write is refused, the plugin runs
	// again, and the write goes once more: its caller sees it succeed.
	p.hand(t, mint(t, ns, "exec-2"))
	w.arm()
	revoke(t, ns, "exec-1", tok1)
	if err := write(t, r.srv, name, ns, "written"); err != nil {
		t.Fatalf("a write after the revocation: %v", err)
	}
	took := reconciled(t, name, ns, "after")
	watchesAgain(t, w, name, ns)
	gap := w.gap(t)
	if n := p.runs(t) - runs; n != 1 {
		t.Errorf("plugin ran %d times after the revocation, want once", n)
	}
	steady(t, r.srv, name, w, relists)
	refusals := w.state().refusals
	t.Logf("figure: exec plugin, credential revoked and reissued: refused → next successful call %s (%d refusal(s) at the wire); a ConfigMap created after the revocation reconciled in %s; 0 restarts, 0 relists",
		gap.Round(time.Microsecond), refusals, took.Round(time.Millisecond))
}

// A token file is rewritten with a new token and the old one revoked:
// the member reads the file again on the first refusal (client-go's own
// file source would send the old token for up to a minute, and the member
// would fail), and sends that request once more.
func TestCredTokenFileRotatedInPlace(t *testing.T) {
	ns := testNamespace(t)
	const name = "cred-file"
	w := &wire{}
	path := filepath.Join(t.TempDir(), "token")
	tok1 := mint(t, ns, "file-1")
	writeAtomically(t, path, tok1)
	r := startServer(t, ns, nil, credOptions)
	if err := r.srv.Add(credMember(name, w, func(c *rest.Config) { c.BearerTokenFile = path })); err != nil {
		t.Fatal(err)
	}
	waitReady(t, r.srv, name)
	reconciled(t, name, ns, "before")
	relists := w.state().relists

	writeAtomically(t, path, mint(t, ns, "file-2"))
	w.arm()
	revoke(t, ns, "file-1", tok1)
	watchesAgain(t, w, name, ns)
	if err := write(t, r.srv, name, ns, "written"); err != nil {
		t.Fatalf("a write after the revocation: %v", err)
	}
	took := reconciled(t, name, ns, "after")
	gap := w.gap(t)
	steady(t, r.srv, name, w, relists)
	mgr, err := r.srv.GetManager(name)
	if err != nil {
		t.Fatal(err)
	}
	if got := mgr.GetConfig().BearerTokenFile; got != path {
		t.Errorf("the member's config names token file %q, want %q", got, path)
	}
	refusals := w.state().refusals
	t.Logf("figure: token file rotated, old token revoked: refused → next successful call %s (%d refusal(s) at the wire); a ConfigMap created after the revocation reconciled in %s; 0 restarts, 0 relists",
		gap.Round(time.Microsecond), refusals, took.Round(time.Millisecond))
}

// A Secret's token is rotated (an Update whose config differs in its token
// alone): the running member takes it in place, without a restart or a
// relist, whether the old token is revoked after the Update (nothing is
// ever refused) or before it (requests are refused until the Update
// arrives, within the refresh grace).
func TestCredSecretRotatedInPlace(t *testing.T) {
	ns := testNamespace(t)
	const name = "cred-secret"
	w := &wire{}
	toks := map[string]string{}
	for _, sa := range []string{"secret-1", "secret-2", "secret-3"} {
		toks[sa] = mint(t, ns, sa)
	}
	member := func(sa string) *config.NamedConfig {
		return credMember(name, w, func(c *rest.Config) { c.BearerToken = toks[sa] })
	}
	r := startServer(t, ns, nil, credOptions)
	if err := r.srv.Add(member("secret-1")); err != nil {
		t.Fatal(err)
	}
	waitReady(t, r.srv, name)
	reconciled(t, name, ns, "before")
	relists := w.state().relists
	usesToken := func(sa string) {
		t.Helper()
		mgr, err := r.srv.GetManager(name)
		if err != nil {
			t.Fatal(err)
		}
		if mgr.GetConfig().BearerToken != toks[sa] {
			t.Errorf("the member's config does not name the token of %s", sa)
		}
	}

	// Rotated, then revoked: nothing is ever refused.
	begin := time.Now()
	if err := r.srv.Update(member("secret-2")); err != nil {
		t.Fatal(err)
	}
	updated := time.Since(begin)
	usesToken("secret-2")
	w.arm()
	revoke(t, ns, "secret-1", toks["secret-1"])
	took := reconciled(t, name, ns, "rotated-first")
	if n := w.state().refusals; n != 0 {
		t.Errorf("%d requests refused after the token was rotated before its revocation, want 0", n)
	}
	t.Logf("figure: Secret rotated before the old token is revoked: Update returned in %s; 0 requests refused; a ConfigMap created after the revocation reconciled in %s", updated.Round(time.Microsecond), took.Round(time.Millisecond))

	// Revoked, then rotated: the member's requests are refused until the
	// Update comes; it runs on meanwhile.
	w.arm()
	revoke(t, ns, "secret-2", toks["secret-2"])
	createConfigMap(t, credCluster, ns, "revoked-first")
	test.Eventually(t, 30*time.Second, "a request of the member refused", func() bool { return w.state().refusals > 0 })
	updatedAt := time.Now()
	if err := r.srv.Update(member("secret-3")); err != nil {
		t.Fatal(err)
	}
	usesToken("secret-3")
	test.Eventually(t, 30*time.Second, "revoked-first reconciled", func() bool { return ackIn(t, credCluster, ns, "revoked-first") == name })
	gap := w.gap(t)
	seen := w.state()
	steady(t, r.srv, name, w, relists)
	t.Logf("figure: Secret rotated after the old token was revoked: refused → next successful call %s (%d refusal(s) at the wire; includes the test's wait for a refusal and its Update), Update → next successful call %s; 0 restarts, 0 relists",
		gap.Round(time.Microsecond), seen.refusals, seen.accepted.Sub(updatedAt).Round(time.Microsecond))
}

// A credential refused even after its renewal (the exec plugin hands out
// the revoked token again) fails the member once the refresh grace has
// passed, as any rejected credentials do: Failed, with an error saying so
// that holds no token, in Status and in every log line.
func TestCredRefusedAfterRenewalFailsMember(t *testing.T) {
	ns := testNamespace(t)
	const name = "cred-refused"
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 10})
	w := &wire{}
	p := newExecPlugin(t)
	tok := mint(t, ns, "refused-1")
	p.hand(t, tok)
	r := startServer(t, ns, func(o *ctrl.Options) { o.Logger = log }, credOptions)
	if err := r.srv.Add(credMember(name, w, p.set)); err != nil {
		t.Fatal(err)
	}
	waitReady(t, r.srv, name)
	runs := p.runs(t)
	// The grace runs from the member's first refusal, which its probe may
	// meet while revoke still waits to see the token refused: measured
	// from the first refusal the wire saw, which comes no later.
	w.arm()
	revoke(t, ns, "refused-1", tok)
	if err := write(t, r.srv, name, ns, "refused"); !apierrors.IsUnauthorized(err) {
		t.Errorf("a write with the revoked credential: %v, want 401", err)
	}
	var st server.ClusterStatus
	test.Eventually(t, credGrace+30*time.Second, name+" Failed", func() bool {
		st, _ = r.srv.Status(name)
		return st.Failures > 0
	})
	took := time.Since(w.state().refused)
	if took < credGrace {
		t.Errorf("Failed %s after the refusal, before the refresh grace of %s", took, credGrace)
	}
	msg := fmt.Sprint(st.LastError)
	if !strings.Contains(msg, "credentials rejected") || !strings.Contains(msg, "401") || strings.Contains(msg, tok) {
		t.Errorf("last error %q: want the rejected credentials and the 401, without the token", msg)
	}
	if p.runs(t) <= runs {
		t.Error("the plugin was not run again before the member failed")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, l := range lines {
		if strings.Contains(l, tok) {
			t.Fatalf("a log line holds the token: %s", l)
		}
	}
	t.Logf("figure: exec credential refused after renewal: member Failed %s after the first refusal (refresh grace %s): %v", took.Round(time.Millisecond), credGrace, st.LastError)
}

// Tokens rotated back to back while a writer streams writes through the
// fan-out client, each old token revoked right after its Update: a write
// sent with a token revoked meanwhile goes once more with the new one.
// Every write succeeds, once; the member never restarts.
func TestCredRotationWhileWriting(t *testing.T) {
	ns := testNamespace(t)
	const name = "cred-race"
	w := &wire{}
	sas := []string{"race-1", "race-2", "race-3", "race-4"}
	toks := map[string]string{}
	for _, sa := range sas {
		toks[sa] = mint(t, ns, sa)
	}
	member := func(sa string) *config.NamedConfig {
		return credMember(name, w, func(c *rest.Config) { c.BearerToken = toks[sa] })
	}
	r := startServer(t, ns, nil, credOptions)
	if err := r.srv.Add(member(sas[0])); err != nil {
		t.Fatal(err)
	}
	waitReady(t, r.srv, name)
	w.arm()
	stop := make(chan struct{})
	var writes atomic.Int64
	var failed int
	var firstErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			writes.Add(1)
			if err := write(t, r.srv, name, ns, fmt.Sprintf("w-%d", i)); err != nil {
				failed++
				if firstErr == nil {
					firstErr = err
				}
			}
		}
	}()
	wrote := func(more int64) {
		t.Helper()
		n := writes.Load()
		test.Eventually(t, 30*time.Second, "writes under way", func() bool { return writes.Load() >= n+more })
	}
	wrote(10)
	for i := 1; i < len(sas); i++ {
		if err := r.srv.Update(member(sas[i])); err != nil {
			t.Fatal(err)
		}
		if err := test.DeleteServiceAccount(context.Background(), fleet.Cluster(credCluster).Config, ns, sas[i-1]); err != nil {
			t.Fatal(err)
		}
		test.Eventually(t, 30*time.Second, sas[i-1]+" refused", func() bool {
			return apierrors.IsUnauthorized(tokenAnswer(t, toks[sas[i-1]]))
		})
	}
	wrote(10)
	close(stop)
	<-done
	if failed > 0 {
		t.Errorf("%d of %d writes failed, the first with: %v", failed, writes.Load(), firstErr)
	}
	var list corev1.ConfigMapList
	if err := adminClient(t, credCluster).List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	written := 0
	for _, cm := range list.Items {
		if strings.HasPrefix(cm.Name, "w-") && !strings.HasSuffix(cm.Name, "-ack") {
			written++
		}
	}
	if int64(written) != writes.Load() {
		t.Errorf("%d ConfigMaps written, %d writes made", written, writes.Load())
	}
	st, _ := r.srv.Status(name)
	if st.Phase != server.PhaseReady || st.Restarts != 0 || st.Failures != 0 {
		t.Errorf("%s is %s with %d restarts, %d failures (last error %v)", name, st.Phase, st.Restarts, st.Failures, st.LastError)
	}
	refusals := w.state().refusals
	t.Logf("%d writes across %d rotations, %d refused at the wire, none failed", writes.Load(), len(sas)-1, refusals)
}

// Delete while the exec plugin renews the member's credential (slowly):
// Delete returns, the write waiting on the renewal ends, and once the
// Server has stopped nothing of it is left running.
func TestCredDeleteDuringRenewal(t *testing.T) {
	ns := testNamespace(t)
	const name = "cred-delete"
	w := &wire{}
	p := newExecPlugin(t)
	tok1 := mint(t, ns, "delete-1")
	tok2 := mint(t, ns, "delete-2")
	// The test's own calls to the cluster (mint, revoke) leave no
	// connection open; nothing else may be left once the Server stops.
	ignore := goleak.IgnoreCurrent()
	// client-go drops a cached transport, and its connection, once it is
	// garbage; a helper that left its connection open would open another
	// after this, which the check below would find.
	runtime.GC()
	p.hand(t, tok1)
	r := startServer(t, ns, nil, credOptions)
	if err := r.srv.Add(credMember(name, w, p.set)); err != nil {
		t.Fatal(err)
	}
	waitReady(t, r.srv, name)
	p.hand(t, tok2)
	p.slow(t)
	runs := p.runs(t)
	revoke(t, ns, "delete-1", tok1)
	wrote := make(chan error, 1)
	go func() { wrote <- write(t, r.srv, name, ns, "during") }()
	test.Eventually(t, 30*time.Second, "the plugin renewing the credential", func() bool { return p.runs(t) > runs })
	begin := time.Now()
	if err := r.srv.Delete(name); err != nil {
		t.Fatal(err)
	}
	t.Logf("Delete during the renewal returned in %s", time.Since(begin).Round(time.Millisecond))
	select {
	case err := <-wrote:
		t.Logf("the write waiting on the renewal: %v", err)
		if err != nil && !errors.Is(err, server.ErrClusterNotReady) && !errors.Is(err, server.ErrClusterNotFound) && !apierrors.IsUnauthorized(err) {
			t.Errorf("write ended with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the write waiting on the renewal never returned")
	}
	if _, err := r.srv.Status(name); !errors.Is(err, server.ErrClusterNotFound) {
		t.Errorf("Status after Delete: %v", err)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	leakcheck.VerifyNone(t, ignore)
}

// A member that failed on refused credentials and waits out its backoff
// restarts at once when an Update brings new ones, rather than take them
// in place and wait: the next start would come only after the backoff.
func TestCredUpdateRestartsAFailedMemberAtOnce(t *testing.T) {
	ns := testNamespace(t)
	const name = "cred-failed"
	w := &wire{}
	tok1 := mint(t, ns, "failed-1")
	tok2 := mint(t, ns, "failed-2")
	revoke(t, ns, "failed-1", tok1)
	r := startServer(t, ns, nil, func(o *server.Options) {
		credOptions(o)
		o.Backoff.Duration, o.Backoff.Cap = time.Minute, time.Minute
	})
	if err := r.srv.Add(credMember(name, w, func(c *rest.Config) { c.BearerToken = tok1 })); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 30*time.Second, name+" Failed", func() bool {
		st, _ := r.srv.Status(name)
		return st.Phase == server.PhaseFailed
	})
	begin := time.Now()
	if err := r.srv.Update(credMember(name, w, func(c *rest.Config) { c.BearerToken = tok2 })); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 20*time.Second, name+" Ready on the new token, long before its backoff ends", func() bool {
		st, _ := r.srv.Status(name)
		return st.Phase == server.PhaseReady
	})
	t.Logf("Failed member Ready %s after the Update (backoff 1m)", time.Since(begin).Round(time.Millisecond))
	reconciled(t, name, ns, "after")
}
