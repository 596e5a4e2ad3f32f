package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// controller-runtime's global logger can be set once only: the first
// ctrl.SetLogger fulfils its delegating logger, and later calls change
// nothing. So that a test can route it, the package's global logger is a
// switch, installed here before TestMain runs (TestMain's own
// ctrl.SetLogger(logr.Discard()) is then a no-op), discarding everything
// until a test points it somewhere.
var ctrlLogTarget atomic.Pointer[logr.Logger]

func init() {
	ctrl.SetLogger(logr.New(switchSink{target: &ctrlLogTarget}))
}

// switchSink forwards to whatever logger target holds, if any.
type switchSink struct {
	target *atomic.Pointer[logr.Logger]
	names  []string
	values []any
}

func (s switchSink) current() (logr.Logger, bool) {
	l := s.target.Load()
	if l == nil {
		return logr.Logger{}, false
	}
	out := *l
	for _, n := range s.names {
		out = out.WithName(n)
	}
	if len(s.values) > 0 {
		out = out.WithValues(s.values...)
	}
	return out, true
}

func (s switchSink) Init(logr.RuntimeInfo) {}

func (s switchSink) Enabled(level int) bool {
	l, ok := s.current()
	return ok && l.V(level).Enabled()
}

func (s switchSink) Info(level int, msg string, kv ...any) {
	if l, ok := s.current(); ok {
		l.V(level).Info(msg, kv...)
	}
}

func (s switchSink) Error(err error, msg string, kv ...any) {
	if l, ok := s.current(); ok {
		l.Error(err, msg, kv...)
	}
}

func (s switchSink) WithValues(kv ...any) logr.LogSink {
	s.values = append(slices.Clip(s.values), kv...)
	return s
}

func (s switchSink) WithName(name string) logr.LogSink {
	s.names = append(slices.Clip(s.names), name)
	return s
}

// TestSecurityAuthPluginsRefused drops a kubeconfig with an exec user and
// one with an auth-provider user into a watched directory: both are refused
// by default, with an error naming the file, and the exec program never
// runs. With configwatcher.AllowAuthPlugins the exec one is accepted.
func TestSecurityAuthPluginsRefused(t *testing.T) {
	ns := namespace(t, "security-plugins")
	a := fleet.Cluster("a")
	tok := saToken(t, "a", ns, "exec-plugin")
	r := startFaultServer(t, ns, logr.Discard(), false)

	// The exec plugin leaves a mark when it runs, and hands out a real token.
	bin := t.TempDir()
	marker := filepath.Join(bin, "ran")
	plugin := filepath.Join(bin, "credential-plugin")
	script := fmt.Sprintf("#!/bin/sh\necho \"$$\" >> %s\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"%s\"}}'\n", marker, tok)
	if err := os.WriteFile(plugin, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	kubeconfig := func(name string, user *clientcmdapi.AuthInfo) []byte {
		kc := test.KubeconfigFor(name, a.Config)
		kc.AuthInfos[name] = user
		raw, err := clientcmd.Write(kc)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	execUser := func() *clientcmdapi.AuthInfo {
		return &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
			Command:         plugin,
			APIVersion:      "client.authentication.k8s.io/v1",
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
		}}
	}
	providerUser := &clientcmdapi.AuthInfo{AuthProvider: &clientcmdapi.AuthProviderConfig{
		Name:   "oidc",
		Config: map[string]string{"client-id": "mccr", "idp-issuer-url": "https://issuer.invalid", "id-token": "not-a-real-id-token"},
	}}

	// Default: refused.
	dir := t.TempDir()
	fw, err := configwatcher.NewFileWatcher(dir)
	if err != nil {
		t.Fatal(err)
	}
	r.srv.Watch(fw)
	execPath := filepath.Join(dir, "exec.kubeconfig")
	providerPath := filepath.Join(dir, "auth-provider.kubeconfig")
	writeFileAtomically(t, execPath, kubeconfig("sec-exec", execUser()))
	writeFileAtomically(t, providerPath, kubeconfig("sec-auth-provider", providerUser))
	// A good file dropped alongside: once it is Added, the others were read.
	writeFileAtomically(t, filepath.Join(dir, "ok.kubeconfig"), kubeconfigBytes(t, "sec-ok", a.Config))
	waitPhase(t, r.srv, "sec-ok", server.PhaseReady, 60*time.Second)
	named := func(path string) error {
		for _, we := range r.srv.WatchErrors() {
			if strings.Contains(we.Err.Error(), path) {
				return we.Err
			}
		}
		return nil
	}
	test.Eventually(t, 10*time.Second, "errors naming both files", func() bool { return named(execPath) != nil && named(providerPath) != nil })
	execErr, providerErr := named(execPath), named(providerPath)
	if !errors.Is(execErr, config.ErrAuthPluginRefused) || !strings.Contains(execErr.Error(), "exec") {
		t.Errorf("error for the exec kubeconfig: %v", execErr)
	}
	if !errors.Is(providerErr, config.ErrAuthPluginRefused) || !strings.Contains(providerErr.Error(), "auth-provider") {
		t.Errorf("error for the auth-provider kubeconfig: %v", providerErr)
	}
	if names := r.srv.ClusterNames(); !slices.Equal(names, []string{"sec-ok"}) {
		t.Errorf("clusters: %v, want only sec-ok", names)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the exec plugin of a refused kubeconfig ran (marker: %v)", err)
	}
	t.Logf("figure: refused by default: %v", execErr)
	t.Logf("figure: refused by default: %v", providerErr)

	// Opted in: the exec user is accepted, and its plugin is what
	// authenticates the member.
	dir2 := t.TempDir()
	fw2, err := configwatcher.NewFileWatcher(dir2, configwatcher.AllowAuthPlugins())
	if err != nil {
		t.Fatal(err)
	}
	r.srv.Watch(fw2)
	writeFileAtomically(t, filepath.Join(dir2, "exec.kubeconfig"), kubeconfig("sec-exec-allowed", execUser()))
	test.Eventually(t, 10*time.Second, "sec-exec-allowed added", func() bool { return slices.Contains(r.srv.ClusterNames(), "sec-exec-allowed") })
	st := waitPhase(t, r.srv, "sec-exec-allowed", server.PhaseReady, 60*time.Second)
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the accepted exec plugin did not run: %v", err)
	}
	t.Logf("figure: with AllowAuthPlugins: sec-exec-allowed added and %s (authenticated by its exec plugin)", st.Phase)
}

// syncBuffer is a log destination shared by every logger of a test.
type syncBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines int
}

func (b *syncBuffer) add(prefix, args string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.WriteString(prefix)
	b.buf.WriteByte(' ')
	b.buf.WriteString(args)
	b.buf.WriteByte('\n')
	b.lines++
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Write takes klog's output.
func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines += bytes.Count(p, []byte{'\n'})
	return b.buf.Write(p)
}

// captureVerbosity is the verbosity of every captured logger. At 8,
// client-go logs each request and response with its headers and bodies. It
// is not higher because at 9 client-go's debugging round tripper adds
// detailed connection timing, whose httptrace callbacks write fields that
// its RoundTrip reads without the lock (client-go v0.37.0,
// transport/round_trippers.go: written under muTrace in ConnectDone, read
// bare after RoundTrip returns), a data race -race reports whenever a dial
// outlives its request. The per-request level comes from the logger in the
// request's ctx, the Server's own, so that logger is capped too.
const captureVerbosity = 8

// captureLogs routes every logger of the process into one buffer until the
// test ends: the logger it returns (for the Server and watchers),
// controller-runtime's global logger, and klog (client-go's request and
// response logging included). klog's output is redirected rather than given
// a logger: klog.SetLogger and ClearLogger are not safe while goroutines
// log, SetOutput and the verbosity are.
func captureLogs(t *testing.T) (logr.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	log := funcr.New(buf.add, funcr.Options{Verbosity: captureVerbosity})
	ctrlLogTarget.Store(&log)
	var fs flag.FlagSet
	klog.InitFlags(&fs)
	klog.SetOutput(buf)
	klog.LogToStderr(false)
	if err := fs.Set("v", strconv.Itoa(captureVerbosity)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = fs.Set("v", "0")
		klog.LogToStderr(true)
		ctrlLogTarget.Store(nil)
	})
	return log, buf
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestSecurityLogsHoldNoSecrets captures everything logged while a Server
// runs members from kubeconfig files with ServiceAccount tokens, a client
// certificate, and a password, reads a broken kubeconfig, rotates a token,
// and meets revoked tokens; then no token, key or password may appear in
// the captured output.
func TestSecurityLogsHoldNoSecrets(t *testing.T) {
	const n = 3
	ns := namespace(t, "security-logs")
	for _, m := range members {
		configMaps(t, m, ns, n)
	}
	a, b, c := fleet.Cluster("a"), fleet.Cluster("b"), fleet.Cluster("c")

	// Every secret is made before the capture starts: the test's own
	// requests for them are not the Server's to log.
	tokA1, tokA2 := saToken(t, "a", ns, "log-a1"), saToken(t, "a", ns, "log-a2")
	tokB := saToken(t, "b", ns, "log-b")
	tokR := saToken(t, "c", ns, "log-r")
	revokeSA(t, "c", ns, "log-r", tokR)
	certUser, err := c.Env.AddUser(envtest.User{Name: "log-cert-user", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	certCfg := certUser.Config()
	password := "pw-" + randomHex(t, 16)
	basic := test.KubeconfigFor("log-basic", test.TokenConfig(b.Config, ""))
	basic.AuthInfos["log-basic"].Username, basic.AuthInfos["log-basic"].Password = "log-basic-user", password
	basicKubeconfig, err := clientcmd.Write(basic)
	if err != nil {
		t.Fatal(err)
	}
	brokenSecret := "broken-" + randomHex(t, 20)
	broken := fmt.Sprintf("apiVersion: v1\nkind: Config\nusers:\n- name: x\n  user:\n    token: %s\n    [[[ this is not yaml\n", brokenSecret)

	secrets := map[string]string{
		"token a1": tokA1, "token a2": tokA2, "token b": tokB, "revoked token": tokR,
		"password": password, "token in the broken file": brokenSecret,
		"client key PEM": string(certCfg.KeyData), "client key PEM, base64": base64.StdEncoding.EncodeToString(certCfg.KeyData),
	}
	for i, tok := range []string{tokA1, tokA2, tokB, tokR} {
		// A JWT's payload and signature, each on its own.
		parts := strings.Split(tok, ".")
		for j, p := range parts[1:] {
			secrets[fmt.Sprintf("token %d part %d", i, j+2)] = p
		}
	}
	// The key's base64 body, line by line.
	for i, line := range strings.Split(string(certCfg.KeyData), "\n") {
		if len(line) >= 16 && !strings.HasPrefix(line, "-----") {
			secrets[fmt.Sprintf("client key line %d", i)] = line
		}
	}

	// The files hold the secrets this test looks for.
	kubeconfigs := map[string][]byte{
		"log-a":       kubeconfigBytes(t, "log-a", test.TokenConfig(a.Config, tokA1)),
		"log-a v2":    kubeconfigBytes(t, "log-a", test.TokenConfig(a.Config, tokA2)),
		"log-b":       kubeconfigBytes(t, "log-b", test.TokenConfig(b.Config, tokB)),
		"log-cert":    kubeconfigBytes(t, "log-cert", certCfg),
		"log-basic":   basicKubeconfig,
		"log-revoked": kubeconfigBytes(t, "log-revoked", test.TokenConfig(c.Config, tokR)),
		"broken":      []byte(broken),
	}
	for file, secret := range map[string]string{
		"log-a": tokA1, "log-a v2": tokA2, "log-b": tokB, "log-cert": secrets["client key PEM, base64"],
		"log-basic": password, "log-revoked": tokR, "broken": brokenSecret,
	} {
		if !bytes.Contains(kubeconfigs[file], []byte(secret)) {
			t.Fatalf("the %s kubeconfig does not hold the secret the test looks for", file)
		}
	}

	log, buf := captureLogs(t)
	ctrl.Log.WithName("e2e").Info("controller-runtime's global logger is captured")

	dir := t.TempDir()
	file := func(name string) string { return filepath.Join(dir, name+".kubeconfig") }
	for _, f := range []string{"log-a", "log-b", "log-cert"} {
		writeFileAtomically(t, file(f), kubeconfigs[f])
	}
	r := startFaultServer(t, ns, log, true, func(o *server.Options) {
		o.Backoff.Duration, o.Backoff.Factor, o.Backoff.Cap = 200*time.Millisecond, 2, 2*time.Second
	})
	fw, err := configwatcher.NewFileWatcher(dir, configwatcher.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	r.srv.Watch(fw)
	targets := []writeTarget{{"log-a", "a"}, {"log-b", "b"}, {"log-cert", "c"}}
	for _, tg := range targets {
		waitPhase(t, r.srv, tg.name, server.PhaseReady, 60*time.Second)
	}
	seq := 1
	round := func(targets []writeTarget) {
		t.Helper()
		written := writeRound(t, targets, ns, objNames(n), seq)
		for _, tg := range targets {
			if behind, _ := awaitSeq(r.rec, tg.name, objNames(n), seq, written[tg.name], time.Now().Add(20*time.Second)); len(behind) > 0 {
				t.Fatalf("%s did not reconcile %v at seq %d", tg.name, behind, seq)
			}
		}
		seq++
	}
	round(targets)

	// A broken file.
	writeFileAtomically(t, file("broken"), kubeconfigs["broken"])
	test.Eventually(t, 10*time.Second, "broken file reported", func() bool {
		return slices.ContainsFunc(r.srv.WatchErrors(), func(we server.WatchError) bool { return strings.Contains(we.Err.Error(), file("broken")) })
	})
	// A password the API server does not accept (it has no basic auth).
	writeFileAtomically(t, file("log-basic"), kubeconfigs["log-basic"])
	waitPhase(t, r.srv, "log-basic", server.PhaseFailed, 30*time.Second)
	// Rotation, then the old token revoked.
	writeFileAtomically(t, file("log-a"), kubeconfigs["log-a v2"])
	waitToken(t, r.srv, "log-a", tokA2, time.Now(), 30*time.Second)
	if err := test.DeleteServiceAccount(context.Background(), a.Config, ns, "log-a1"); err != nil {
		t.Fatal(err)
	}
	round(targets)
	// A revoked token in a new file.
	writeFileAtomically(t, file("log-revoked"), kubeconfigs["log-revoked"])
	revoked := waitPhase(t, r.srv, "log-revoked", server.PhaseFailed, 30*time.Second)
	// The token of a running member revoked: the API server answers 401,
	// to its writes or to its reachability probe, whichever comes first;
	// either way the rejection is logged, and the member fails.
	if err := test.DeleteServiceAccount(context.Background(), b.Config, ns, "log-b"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		writeRound(t, []writeTarget{{"log-b", "b"}}, ns, objNames(1), seq)
		seq++
		errs, last := r.rec.failures("log-b")
		if errs > 0 && strings.Contains(errString(last), "Unauthorized") {
			break
		}
		if st, err := r.srv.Status("log-b"); err == nil && st.Phase == server.PhaseFailed && strings.Contains(errString(st.LastError), "credentials") {
			break
		}
		if time.Now().After(deadline) {
			st, _ := r.srv.Status("log-b")
			t.Fatalf("log-b's writes not rejected as Unauthorized, nor the member failed for its credentials, within 30s of the revocation (%d failed, last: %v; member %s: %v)", errs, last, st.Phase, st.LastError)
		}
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	basicSt, _ := r.srv.Status("log-basic")
	out := buf.String()

	leaked := 0
	for what, secret := range secrets {
		if i := strings.Index(out, secret); i >= 0 {
			leaked++
			start, end := max(i-300, 0), min(i+len(secret)+100, len(out))
			t.Errorf("the %s appears in the logs: …%s…", what, out[start:end])
		}
	}
	for _, want := range []string{
		"controller-runtime's global logger is captured", // ctrl.Log
		"cluster ready", "log-cert", file("broken"), "log-basic", "log-revoked", "credentials rejected",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the logs do not mention %q: the capture missed something", want)
		}
	}
	klogLines := len(regexp.MustCompile(`(?m)^[IWEF]\d{4} `).FindAllStringIndex(out, -1))
	t.Logf("figure: logs: %d lines (%d of them from klog), %d bytes captured (Server and watcher logger, controller-runtime's global logger, klog; all at verbosity %d); %d secrets checked, %d found",
		buf.lines, klogLines, len(out), captureVerbosity, len(secrets), leaked)
	t.Logf("figure: logs: log-basic: %v", basicSt.LastError)
	t.Logf("figure: logs: log-revoked: %v", revoked.LastError)
}
