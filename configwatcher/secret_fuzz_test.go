package configwatcher

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/fuzzcheck"
)

// secretWatcherFor is a SecretWatcher that is never started: what its
// claim needs.
func secretWatcherFor(t *testing.T, allowPlugins bool, opts ...SecretOption) *SecretWatcher {
	t.Helper()
	if allowPlugins {
		opts = append(opts, AllowAuthPlugins())
	}
	o, err := newSecretOptions(opts)
	if err != nil {
		t.Fatal(err)
	}
	// The host's own credential must never show either: Argo CD's
	// in-cluster Secrets are reached with this config.
	host := &rest.Config{Host: "https://127.0.0.1:6443", BearerToken: fuzzcheck.Token}
	return &SecretWatcher{opts: o, hostCfg: host, claimed: newClaimsState(), claims: map[string]string{}}
}

// claimSecret reads s as the watcher's cache would hand it over
// (transformed), checks the reading and publishes it.
func claimSecret(t *testing.T, w *SecretWatcher, s *corev1.Secret, l *leakCheck) {
	t.Helper()
	if _, err := w.transform(s); err != nil {
		t.Fatal(err)
	}
	ref := s.Namespace + "/" + s.Name
	c := w.claim(s)
	if c.ref != ref || c.id != ref {
		t.Fatalf("claim of %s: ref %q, id %q", ref, c.ref, c.id)
	}
	o := objectClaim{
		source: "Secret " + ref, name: c.name, cfg: c.cfg, err: c.err,
		sentinels: []error{ErrSecretInvalid, config.ErrAuthPluginRefused, config.ErrFileReferenceRefused},
		plugins:   w.opts.AllowAuthPlugins,
	}
	o.check(t, l)
	h := fuzzHost(nil)
	publishClaims(t, &h, c)
	published(t, h.pub, l, o)
}

// FuzzSecretKubeconfig fuzzes multicluster-runtime's kubeconfig Secrets:
// the Secret's name (the cluster's) and the kubeconfig under its
// "kubeconfig" key, with and without AllowAuthPlugins. See fuzz_test.go
// for what is checked; a Secret's kubeconfig may name no file at all.
func FuzzSecretKubeconfig(f *testing.F) {
	f.Add("east", []byte(tokenKubeconfig("east", "https://127.0.0.1:6443", fuzzcheck.Token)), false)
	f.Add("east", []byte(tokenKubeconfig("evil-\xff\xfe", "https://admin:"+fuzzcheck.Password+"@127.0.0.1:6443", fuzzcheck.Token)), false)
	f.Add("east", []byte("clusters: ["+fuzzcheck.Token), true)
	f.Fuzz(func(t *testing.T, name string, kubeconfig []byte, allowPlugins bool) {
		w := secretWatcherFor(t, allowPlugins)
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.opts.Namespace, Name: objectName(name, "cluster"), Labels: map[string]string{w.opts.Label: w.opts.LabelValue}},
			Data:       map[string][]byte{w.opts.Key: kubeconfig, "other": []byte(fuzzcheck.Token)},
		}
		l := newLeakCheck(s.Namespace + "/" + s.Name)
		l.kubeconfig(kubeconfig)
		claimSecret(t, w, s, l)
	})
}

// FuzzArgoCDSecret fuzzes Argo CD's cluster Secrets: the data keys name,
// server and config (the JSON with bearerToken, username and password,
// tlsClientConfig, execProviderConfig, awsAuthConfig, proxyUrl), with the
// keys Argo CD adds beside them (namespaces, clusterResources, project),
// with and without AllowAuthPlugins. See fuzz_test.go for what is checked.
func FuzzArgoCDSecret(f *testing.F) {
	f.Add([]byte("east"), []byte("https://127.0.0.1:6443"), []byte(`{"bearerToken":"`+fuzzcheck.Token+`","tlsClientConfig":{"insecure":true}}`), []byte("a,b"), false)
	f.Add([]byte("evil-\xff\xfe"), []byte("https://127.0.0.1:6443"), []byte(`{"bearerToken":"`+fuzzcheck.Token+`"}`), []byte(""), false)
	f.Add([]byte("east"), []byte("https://admin:"+fuzzcheck.Password+"@h"), []byte(`{"username":"admin","password":"`+fuzzcheck.Password+`"}`), []byte(""), false)
	f.Add([]byte("east"), []byte("https://h"), []byte(`{"execProviderConfig":{"command":"x","apiVersion":"client.authentication.k8s.io/v1","env":{"K":"`+fuzzcheck.EnvValue+`"}}}`), []byte(""), true)
	f.Add([]byte("east"), []byte("https://h"), []byte(`{"awsAuthConfig":{"clusterName":"c","roleARN":"arn:aws:iam::1:role/r"}}`), []byte(""), true)
	// Argo CD's in-cluster Secret, as Argo CD writes it, with its own
	// credentials and with none at all.
	f.Add([]byte("in-cluster"), []byte(ArgoCDInClusterServer), []byte(`{"tlsClientConfig":{"insecure":false}}`), []byte(""), false)
	f.Add([]byte("in-cluster"), []byte(ArgoCDInClusterServer+"/"), []byte(`{"bearerToken":"`+fuzzcheck.Token+`","execProviderConfig":{"command":"x"}}`), []byte(""), false)
	f.Add([]byte("in-cluster"), []byte(ArgoCDInClusterServer), []byte(""), []byte(""), false)
	// "namespaces" as `argocd cluster add --namespace` writes it, and as
	// nobody should: empty entries, spaces, duplicates, a wildcard,
	// uppercase, odd bytes, a name too long, thousands of entries.
	token := []byte(`{"bearerToken":"` + fuzzcheck.Token + `"}`)
	for _, ns := range []string{
		"team-a,team-b", " b , a ,, a ,", ",,,", "*", "Team-A", "a\x00b", "a,\xff\xfe,\u202e", strings.Repeat("a", 64),
		strings.Repeat("ns,", 10000), strings.Repeat("a-", 5000),
	} {
		f.Add([]byte("east"), []byte("https://127.0.0.1:6443"), token, []byte(ns), false)
	}
	f.Fuzz(func(t *testing.T, name, server, cfg, namespaces []byte, allowPlugins bool) {
		w := secretWatcherFor(t, allowPlugins, ArgoCDFormat())
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.opts.Namespace, Name: "cluster-x", Labels: map[string]string{w.opts.Label: w.opts.LabelValue}},
			Data: map[string][]byte{
				argoCDNameKey: name, argoCDServerKey: server, argoCDConfigKey: cfg,
				"namespaces": namespaces, "clusterResources": []byte("true"), "project": []byte(fuzzcheck.Token),
				"shard": namespaces,
			},
		}
		// The labels and annotations Argo CD keeps become Properties;
		// the last-applied copy of the Secret never does.
		s.Labels["team"] = string(name)
		s.Annotations = map[string]string{
			"note":                             string(namespaces),
			corev1.LastAppliedConfigAnnotation: `{"data":{"config":"` + fuzzcheck.Token + `"}}`,
		}
		l := newLeakCheck(s.Namespace+"/"+s.Name, string(name), strings.TrimSpace(string(name)))
		l.url(strings.TrimSpace(string(server)))
		l.argoCD(cfg)
		claimSecret(t, w, s, l)
		checkArgoCDScope(t, namespaces)
	})
}

// checkArgoCDScope checks what argoCDScope makes of a "namespaces" value
// (given as clusterResources too): a valid scope of the value's entries,
// sorted and without duplicates, or a brief error that says why.
func checkArgoCDScope(t *testing.T, namespaces []byte) {
	t.Helper()
	scope, err := argoCDScope("east", map[string][]byte{argoCDNamespacesKey: namespaces, argoCDClusterResourcesKey: namespaces})
	if err != nil {
		if !errors.Is(err, ErrSecretInvalid) || !errors.Is(err, config.ErrInvalidScope) {
			t.Fatalf("scope error wraps neither ErrSecretInvalid nor config.ErrInvalidScope: %v", err)
		}
		if len(err.Error()) > 600 || !utf8.ValidString(err.Error()) || strings.ContainsAny(err.Error(), "\n\x00") {
			t.Fatalf("scope error is long or carries odd bytes: %q", err)
		}
		return
	}
	if err := scope.Validate(); err != nil {
		t.Fatalf("scope %v accepted that does not validate: %v", scope, err)
	}
	if !slices.IsSorted(scope.Namespaces) || len(slices.Compact(slices.Clone(scope.Namespaces))) != len(scope.Namespaces) {
		t.Fatalf("scope namespaces %q not sorted and unique", scope.Namespaces)
	}
	for _, ns := range scope.Namespaces {
		if !slices.Contains(strings.Split(string(namespaces), ","), ns) && !strings.Contains(string(namespaces), ns) {
			t.Fatalf("scope namespace %q is not in %q", ns, namespaces)
		}
	}
	if want := string(namespaces) == "true"; scope.ClusterResources != want {
		t.Fatalf("clusterResources %q read as %v", namespaces, scope.ClusterResources)
	}
	_ = scope.String()
}

// argoCD adds what an Argo CD cluster config holds, as far as it decodes.
func (l *leakCheck) argoCD(data []byte) {
	var ac argoCDClusterConfig
	_ = json.Unmarshal(data, &ac)
	l.secrets = append(l.secrets, ac.BearerToken, ac.Password, string(ac.TLSClientConfig.KeyData))
	l.public = append(l.public, ac.Username, ac.TLSClientConfig.ServerName)
	l.url(ac.ProxyURL)
	if e := ac.ExecProviderConfig; e != nil {
		l.public = append(l.public, e.Command, e.APIVersion, e.InstallHint)
		l.public = append(l.public, e.Args...)
		for k, v := range e.Env {
			l.public = append(l.public, k)
			l.secrets = append(l.secrets, v)
		}
	}
	if a := ac.AWSAuthConfig; a != nil {
		l.public = append(l.public, a.ClusterName, a.RoleARN, a.Profile)
	}
}

// tokenKubeconfig is a kubeconfig of one context, named name, reaching
// server with token.
func tokenKubeconfig(name, server, token string) string {
	q := func(s string) string {
		b, err := json.Marshal(s)
		if err != nil {
			panic(err) // a string always marshals
		}
		return string(b)
	}
	return `{"apiVersion":"v1","kind":"Config","current-context":` + q(name) + `,
"clusters":[{"name":` + q(name) + `,"cluster":{"server":` + q(server) + `}}],
"users":[{"name":` + q(name) + `,"user":{"token":` + q(token) + `}}],
"contexts":[{"name":` + q(name) + `,"context":{"cluster":` + q(name) + `,"user":` + q(name) + `}}]}`
}
