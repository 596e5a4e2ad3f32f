package configwatcher_test

import (
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/test"
)

// secretEnv is a host cluster holding cluster Secrets and one member
// cluster they describe; every subtest works in its own namespace of the
// host.
type secretEnv struct {
	host, member *test.Cluster
	hostClient   client.Client
	// tokens reach the member as cluster-admin; the second is the first
	// rotated.
	token, rotated string
}

// TestSecretWatcher runs every test of the SecretWatcher under one fleet:
// two API servers, started once.
func TestSecretWatcher(t *testing.T) {
	// Registered first, so it runs last: after the fleet has stopped.
	t.Cleanup(func() { leakcheck.VerifyNone(t) })
	env := newSecretEnv(t, "sec-host", "sec-member")

	t.Run("Kubeconfig", env.testKubeconfig)
	t.Run("ArgoCD", env.testArgoCD)
	t.Run("ArgoCDNameRefused", env.testArgoCDNameRefused)
	t.Run("AuthPluginsAndFilesRefused", env.testRefused)
	t.Run("DuplicateName", env.testDuplicate)
	t.Run("OtherNamespacesAndLabelsIgnored", env.testIgnored)
	t.Run("ThroughServer", env.testThroughServer)
}

// newSecretEnv starts a fleet of two API servers, a host and a member, and
// mints the member's two tokens.
func newSecretEnv(t *testing.T, host, member string) *secretEnv {
	t.Helper()
	f := test.NewFleet(t, test.Options{}, host, member)
	env := &secretEnv{host: f.Cluster(host), member: f.Cluster(member)}
	var err error
	if env.hostClient, err = client.New(env.host.Config, client.Options{}); err != nil {
		t.Fatal(err)
	}
	if env.token, err = test.ServiceAccountToken(t.Context(), env.member.Config, "mccr-system", memberAccount); err != nil {
		t.Fatal(err)
	}
	if env.rotated, err = test.ServiceAccountToken(t.Context(), env.member.Config, "mccr-system", memberAccount); err != nil {
		t.Fatal(err)
	}
	if env.token == env.rotated {
		t.Fatal("two token requests returned the same token")
	}
	return env
}

// memberAccount is the ServiceAccount of the member (in mccr-system) the
// tokens belong to.
const memberAccount = "sec-host"

func (e *secretEnv) watch(t *testing.T, opts ...configwatcher.SecretOption) *recorder {
	t.Helper()
	opts = append([]configwatcher.SecretOption{configwatcher.WithLogger(testr.New(t))}, opts...)
	w, err := configwatcher.NewSecretWatcher(e.host.Config, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return &recorder{t: t, w: w}
}

func (e *secretEnv) namespace(t *testing.T) string {
	t.Helper()
	ns := test.NamespaceName(t)
	if err := e.hostClient.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// kubeconfigFor is a kubeconfig reaching the member with token only.
func (e *secretEnv) kubeconfigFor(t *testing.T, token string) []byte {
	t.Helper()
	data, err := clientcmd.Write(test.KubeconfigFor("member", test.TokenConfig(e.member.Config, token)))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// argoConfig is the "config" of an Argo CD cluster Secret reaching the
// member with token.
func (e *secretEnv) argoConfig(t *testing.T, token string, extra map[string]any) []byte {
	t.Helper()
	c := map[string]any{
		"bearerToken":     token,
		"tlsClientConfig": map[string]any{"insecure": false, "caData": e.member.Config.CAData},
	}
	maps.Copy(c, extra)
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func (e *secretEnv) create(t *testing.T, ns, name string, lbl map[string]string, data map[string][]byte) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbl}, Data: data}
	if err := e.hostClient.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

func (e *secretEnv) update(t *testing.T, s *corev1.Secret, change func(*corev1.Secret)) {
	t.Helper()
	change(s)
	if err := e.hostClient.Update(t.Context(), s); err != nil {
		t.Fatal(err)
	}
}

var (
	mcrLabel  = map[string]string{configwatcher.DefaultSecretLabel: configwatcher.DefaultSecretLabelValue}
	argoLabel = map[string]string{configwatcher.ArgoCDSecretLabel: configwatcher.ArgoCDSecretLabelValue}
)

// reachesMember checks that cfg is a working config of the member: it
// reads the member's ServiceAccount the tokens belong to.
func (e *secretEnv) reachesMember(t *testing.T, nc *config.NamedConfig, token string) {
	t.Helper()
	if nc.Config.Host != e.member.Config.Host || nc.Config.BearerToken != token {
		t.Fatalf("config %s does not reach the member with the expected token", nc.Redacted())
	}
	c, err := client.New(rest.CopyConfig(nc.Config), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var sa corev1.ServiceAccount
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "mccr-system", Name: memberAccount}, &sa); err != nil {
		t.Fatalf("reading the member with the published config: %v", err)
	}
}

// noSecrets checks that an error message quotes none of the tokens.
func (e *secretEnv) noSecrets(t *testing.T, err error) {
	t.Helper()
	for _, tok := range []string{e.token, e.rotated} {
		if strings.Contains(err.Error(), tok) {
			t.Fatalf("error quotes a token: %v", err)
		}
	}
}

// testKubeconfig: join, rotate, a change that is none, malformed (last
// good config kept), fixed, deleted — in the multicluster-runtime format.
func (e *secretEnv) testKubeconfig(t *testing.T) {
	ns := e.namespace(t)
	r := e.watch(t, configwatcher.WithSecretNamespace(ns))

	s := e.create(t, ns, "member-1", mcrLabel, map[string][]byte{"kubeconfig": e.kubeconfigFor(t, e.token)})
	ev := r.event(configwatcher.Added, "member-1")
	if got, want := ev.Config.Source.Object, "Secret "+ns+"/member-1"; got != want {
		t.Errorf("Source.Object = %q, want %q", got, want)
	}
	e.reachesMember(t, ev.Config, e.token)
	r.quiet(kfQuiet)

	e.update(t, s, func(s *corev1.Secret) { s.Data["kubeconfig"] = e.kubeconfigFor(t, e.rotated) })
	ev = r.event(configwatcher.Updated, "member-1")
	e.reachesMember(t, ev.Config, e.rotated)
	r.quiet(kfQuiet)

	e.update(t, s, func(s *corev1.Secret) { s.Annotations = map[string]string{"touched": "yes"} })
	r.quiet(kfQuiet)
	r.noErrors()

	e.update(t, s, func(s *corev1.Secret) {
		s.Data["kubeconfig"] = []byte("apiVersion: v1\nkind: Config\nusers: [{name: x, user: {token: " + e.token + "}}\n")
	})
	err := r.errFound(configwatcher.ErrSecretInvalid, "Secret "+ns+"/member-1", "last good config")
	if !errors.Is(err, config.ErrInvalidKubeconfig) {
		t.Errorf("error %v does not wrap config.ErrInvalidKubeconfig", err)
	}
	e.noSecrets(t, err)
	r.quiet(kfQuiet)

	e.update(t, s, func(s *corev1.Secret) { delete(s.Data, "kubeconfig") })
	r.err(configwatcher.ErrSecretInvalid, "Secret "+ns+"/member-1", `"kubeconfig"`)
	r.quiet(kfQuiet)

	// Fixed with the config it had: nothing to publish.
	e.update(t, s, func(s *corev1.Secret) { s.Data = map[string][]byte{"kubeconfig": e.kubeconfigFor(t, e.rotated)} })
	r.quiet(kfQuiet)

	if err := e.hostClient.Delete(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	r.event(configwatcher.Deleted, "member-1")
	r.quiet(kfQuiet)

	// A Secret held by a finalizer: its cluster leaves as its deletion
	// starts, as in multicluster-runtime, not once the finalizer goes.
	held := e.create(t, ns, "member-2", mcrLabel, map[string][]byte{"kubeconfig": e.kubeconfigFor(t, e.token)})
	e.update(t, held, func(s *corev1.Secret) { s.Finalizers = []string{"example.com/hold"} })
	r.event(configwatcher.Added, "member-2")
	r.quiet(kfQuiet)
	if err := e.hostClient.Delete(t.Context(), held); err != nil {
		t.Fatal(err)
	}
	r.event(configwatcher.Deleted, "member-2")
	r.quiet(kfQuiet)
	if err := e.hostClient.Get(t.Context(), client.ObjectKeyFromObject(held), held); err != nil || held.DeletionTimestamp == nil {
		t.Fatalf("the Secret's deletion has not started (%v)", err)
	}
	e.update(t, held, func(s *corev1.Secret) { s.Finalizers = nil })
	r.quiet(kfQuiet)
	r.noErrors()
}

// testArgoCD: the same flow in Argo CD's format, the cluster named by the
// Secret's "name".
func (e *secretEnv) testArgoCD(t *testing.T) {
	ns := e.namespace(t)
	r := e.watch(t, configwatcher.ArgoCDFormat(), configwatcher.WithSecretNamespace(ns))

	s := e.create(t, ns, "cluster-abc", argoLabel, map[string][]byte{
		"name":   []byte("argo-member"),
		"server": []byte(e.member.Config.Host),
		"config": e.argoConfig(t, e.token, nil),
	})
	ev := r.event(configwatcher.Added, "argo-member")
	if got, want := ev.Config.Source.Object, "Secret "+ns+"/cluster-abc"; got != want {
		t.Errorf("Source.Object = %q, want %q", got, want)
	}
	e.reachesMember(t, ev.Config, e.token)
	r.quiet(kfQuiet)

	e.update(t, s, func(s *corev1.Secret) { s.Data["config"] = e.argoConfig(t, e.rotated, nil) })
	ev = r.event(configwatcher.Updated, "argo-member")
	e.reachesMember(t, ev.Config, e.rotated)
	r.quiet(kfQuiet)

	e.update(t, s, func(s *corev1.Secret) { s.Data["config"] = []byte(`{"bearerToken": "` + e.rotated + `", `) })
	err := r.errFound(configwatcher.ErrSecretInvalid, "Secret "+ns+"/cluster-abc", "argo-member", "last good config")
	e.noSecrets(t, err)
	r.quiet(kfQuiet)

	e.update(t, s, func(s *corev1.Secret) { delete(s.Data, "name") })
	r.err(configwatcher.ErrSecretInvalid, "Secret "+ns+"/cluster-abc", `"name"`, "last good config")
	r.quiet(kfQuiet)

	if err := e.hostClient.Delete(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	r.event(configwatcher.Deleted, "argo-member")
	r.quiet(kfQuiet)
}

// testArgoCDNameRefused: a Secret whose "name" is rewritten into one
// config.ValidateName refuses is broken: its cluster keeps its last good
// config (no Deleted), the error names the Secret, and a valid name again
// is a rename as usual.
func (e *secretEnv) testArgoCDNameRefused(t *testing.T) {
	ns := e.namespace(t)
	r := e.watch(t, configwatcher.ArgoCDFormat(), configwatcher.WithSecretNamespace(ns))
	s := e.create(t, ns, "cluster-prod", argoLabel, map[string][]byte{
		"name":   []byte("prod"),
		"server": []byte(e.member.Config.Host),
		"config": e.argoConfig(t, e.token, nil),
	})
	r.event(configwatcher.Added, "prod")
	r.settled()

	for _, bad := range []string{"prod\n", "prod ", "pr\u200bod"} {
		e.update(t, s, func(s *corev1.Secret) { s.Data["name"] = []byte(bad) })
		err := r.errFound(config.ErrInvalidName, "Secret "+ns+"/cluster-prod", "last good config")
		e.noSecrets(t, err)
		r.quiet(kfQuiet)
	}
	// Broken otherwise too: still the cluster's last good config.
	e.update(t, s, func(s *corev1.Secret) { s.Data["server"] = []byte("not a URL") })
	r.err(configwatcher.ErrSecretInvalid, "Secret "+ns+"/cluster-prod", "last good config")
	r.quiet(kfQuiet)

	e.update(t, s, func(s *corev1.Secret) {
		s.Data["name"], s.Data["server"] = []byte("prod-2"), []byte(e.member.Config.Host)
	})
	r.event(configwatcher.Deleted, "prod")
	r.event(configwatcher.Added, "prod-2")
	r.settled()

	// A new Secret with a refused name publishes nothing and claims
	// nothing: it is reported, naming it.
	e.create(t, ns, "cluster-bad", argoLabel, map[string][]byte{
		"name":   []byte("prod-2\n"),
		"server": []byte(e.member.Config.Host),
		"config": e.argoConfig(t, e.token, nil),
	})
	r.err(config.ErrInvalidName, "Secret "+ns+"/cluster-bad")
	r.settled()
}

// testRefused: credentials that run programs need AllowAuthPlugins, and a
// kubeconfig in a Secret may name no file at all.
func (e *secretEnv) testRefused(t *testing.T) {
	ns := e.namespace(t)
	execKubeconfig := func(t *testing.T) []byte {
		kc := test.KubeconfigFor("member", test.TokenConfig(e.member.Config, ""))
		kc.AuthInfos["member"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
			Command: "/bin/touch", Args: []string{"/tmp/pwned"}, APIVersion: "client.authentication.k8s.io/v1",
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
		}}
		data, err := clientcmd.Write(kc)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	fileKubeconfig := func(t *testing.T) []byte {
		kc := test.KubeconfigFor("member", test.TokenConfig(e.member.Config, ""))
		kc.AuthInfos["member"] = &clientcmdapi.AuthInfo{TokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token"}
		data, err := clientcmd.Write(kc)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	argoExec := map[string][]byte{
		"name":   []byte("argo-exec"),
		"server": []byte(e.member.Config.Host),
		"config": e.argoConfig(t, "", map[string]any{"execProviderConfig": map[string]any{"command": "/bin/touch", "args": []string{"/tmp/pwned"}}}),
	}
	argoAWS := map[string][]byte{
		"name":   []byte("argo-aws"),
		"server": []byte(e.member.Config.Host),
		"config": e.argoConfig(t, "", map[string]any{"awsAuthConfig": map[string]any{"clusterName": "prod"}}),
	}

	t.Run("Refused", func(t *testing.T) {
		r := e.watch(t, configwatcher.WithSecretNamespace(ns))
		e.create(t, ns, "exec", mcrLabel, map[string][]byte{"kubeconfig": execKubeconfig(t)})
		r.err(config.ErrAuthPluginRefused, "Secret "+ns+"/exec", "exec plugin")
		e.create(t, ns, "tokenfile", mcrLabel, map[string][]byte{"kubeconfig": fileKubeconfig(t)})
		r.err(config.ErrFileReferenceRefused, "Secret "+ns+"/tokenfile", "tokenFile")
		r.quiet(kfQuiet)

		ra := e.watch(t, configwatcher.ArgoCDFormat(), configwatcher.WithSecretNamespace(ns))
		e.create(t, ns, "argo-exec", argoLabel, argoExec)
		ra.err(config.ErrAuthPluginRefused, "Secret "+ns+"/argo-exec", "execProviderConfig")
		e.create(t, ns, "argo-aws", argoLabel, argoAWS)
		ra.err(config.ErrAuthPluginRefused, "Secret "+ns+"/argo-aws", "awsAuthConfig")
		ra.quiet(kfQuiet)
	})

	t.Run("Allowed", func(t *testing.T) {
		// The Secrets above, now read by watchers that accept plugins.
		// Nothing connects, so no plugin runs.
		r := e.watch(t, configwatcher.WithSecretNamespace(ns), configwatcher.AllowAuthPlugins())
		ev := r.event(configwatcher.Added, "exec")
		if ev.Config.Config.ExecProvider == nil || ev.Config.Config.ExecProvider.Command != "/bin/touch" {
			t.Errorf("exec plugin not kept: %+v", ev.Config.Config.ExecProvider)
		}
		// File references stay refused whatever the options.
		r.err(config.ErrFileReferenceRefused, "Secret "+ns+"/tokenfile")

		ra := e.watch(t, configwatcher.ArgoCDFormat(), configwatcher.WithSecretNamespace(ns), configwatcher.AllowAuthPlugins())
		ev = ra.event(configwatcher.Added, "argo-aws")
		if ep := ev.Config.Config.ExecProvider; ep == nil || ep.Command != "aws" || !strings.Contains(strings.Join(ep.Args, " "), "--cluster-name prod") {
			t.Errorf("awsAuthConfig not turned into aws eks get-token: %+v", ep)
		}
		ev = ra.event(configwatcher.Added, "argo-exec")
		if ep := ev.Config.Config.ExecProvider; ep == nil || ep.Command != "/bin/touch" {
			t.Errorf("execProviderConfig not kept: %+v", ep)
		}
	})
}

// testDuplicate: two Argo CD Secrets naming one cluster; the first keeps
// it, the second is an error naming both, and takes over once the first
// is gone: with other credentials, or with the very same config (a Secret
// renamed in Git, whose sync creates the new one before it prunes the
// old), when only the Source tells the two apart.
func (e *secretEnv) testDuplicate(t *testing.T) {
	for _, tc := range []struct{ name, token string }{{"OtherToken", e.rotated}, {"SameConfig", e.token}} {
		t.Run(tc.name, func(t *testing.T) {
			ns := e.namespace(t)
			r := e.watch(t, configwatcher.ArgoCDFormat(), configwatcher.WithSecretNamespace(ns))
			data := func(token string) map[string][]byte {
				return map[string][]byte{
					"name":   []byte("shared"),
					"server": []byte(e.member.Config.Host),
					"config": e.argoConfig(t, token, nil),
				}
			}
			first := e.create(t, ns, "z-first", argoLabel, data(e.token))
			r.event(configwatcher.Added, "shared")
			e.create(t, ns, "a-second", argoLabel, data(tc.token))
			err := r.errFound(configwatcher.ErrSecretDuplicateCluster, "Secret "+ns+"/a-second", "Secret "+ns+"/z-first")
			e.noSecrets(t, err)
			r.quiet(kfQuiet)

			if err := e.hostClient.Delete(t.Context(), first); err != nil {
				t.Fatal(err)
			}
			ev := r.event(configwatcher.Updated, "shared")
			if ev.Config.Source.Object != "Secret "+ns+"/a-second" {
				t.Errorf("cluster served from %s, want the remaining Secret", ev.Config.Source)
			}
			e.reachesMember(t, ev.Config, tc.token)
			r.quiet(kfQuiet)
		})
	}
}

// testIgnored: Secrets of other namespaces, or without the label, are not
// clusters; WatchAllNamespaces finds them all.
func (e *secretEnv) testIgnored(t *testing.T) {
	ns, other := e.namespace(t), e.namespace(t)
	r := e.watch(t, configwatcher.WithSecretNamespace(ns))
	kc := map[string][]byte{"kubeconfig": e.kubeconfigFor(t, e.token)}
	e.create(t, ns, "unlabelled", nil, kc)
	e.create(t, ns, "wrong-value", map[string]string{configwatcher.DefaultSecretLabel: "false"}, kc)
	e.create(t, other, "elsewhere", mcrLabel, kc)
	e.create(t, ns, "here", mcrLabel, kc)
	r.event(configwatcher.Added, "here")
	r.quiet(kfQuiet)
	r.noErrors()

	// Across namespaces there may be other tests' Secrets; only these two
	// names are checked.
	all := e.watch(t, configwatcher.WatchAllNamespaces())
	seen := map[string]bool{}
	timeout := time.After(kfPatience)
	for !seen["here"] || !seen["elsewhere"] {
		select {
		case ev := <-all.w.Events():
			seen[ev.Config.Name] = true
		case err := <-all.w.Errors():
			t.Logf("error from other Secrets: %v", err)
		case <-timeout:
			t.Fatalf("WatchAllNamespaces saw %v, want here and elsewhere", seen)
		}
	}
}
