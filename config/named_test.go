package config

import (
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func loadOne(t *testing.T, path string) *NamedConfig {
	t.Helper()
	cfgs, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfgs) != 1 {
		t.Fatalf("want one config, got %v", names(cfgs))
	}
	return cfgs[0]
}

func TestFingerprintSameFileTwice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	writeFile(t, path, kubeconfig(t, ctxSpec{"a", "https://127.0.0.1:6443", "tok"}))
	first, second := loadOne(t, path), loadOne(t, path)
	if first.Config == second.Config {
		t.Fatal("two loads returned the same *rest.Config")
	}
	if first.Fingerprint() != second.Fingerprint() {
		t.Error("two loads of one file differ")
	}
}

func TestFingerprintChanges(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	writeFile(t, base, kubeconfig(t, ctxSpec{"a", "https://127.0.0.1:6443", "tok"}))
	want := loadOne(t, base).Fingerprint()

	for name, spec := range map[string]ctxSpec{
		"token":  {"a", "https://127.0.0.1:6443", "rotated"},
		"server": {"a", "https://127.0.0.1:6444", "tok"},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			writeFile(t, path, kubeconfig(t, spec))
			if loadOne(t, path).Fingerprint() == want {
				t.Errorf("changing the %s left the fingerprint alone", name)
			}
		})
	}
}

// The same content from another file is the same cluster reached the
// same way, described anew: Fingerprint tells the two apart (a watcher
// publishes the new source), ReachFingerprint and ConnectionFingerprint
// do not (a Server keeps the member running).
func TestFingerprintCoversSourceAlone(t *testing.T) {
	content := kubeconfig(t, ctxSpec{"a", "https://127.0.0.1:6443", "tok"})
	one := filepath.Join(t.TempDir(), "one")
	other := filepath.Join(t.TempDir(), "sub", "other")
	writeFile(t, one, content)
	writeFile(t, other, content)
	a, b := loadOne(t, one), loadOne(t, other)
	if a.Source == b.Source {
		t.Fatal("sources should differ")
	}
	if a.Fingerprint() == b.Fingerprint() {
		t.Error("same content at another source has the same Fingerprint")
	}
	if a.ReachFingerprint() != b.ReachFingerprint() || a.ConnectionFingerprint() != b.ConnectionFingerprint() {
		t.Error("same content at another source is reached differently")
	}
	again := loadOne(t, one)
	if a.Fingerprint() != again.Fingerprint() {
		t.Error("the same file loaded twice has two Fingerprints")
	}
}

func TestFingerprintCoversProxyAndFuncFields(t *testing.T) {
	proxy := func(u string) func(*http.Request) (*url.URL, error) {
		p, _ := url.Parse(u)
		return http.ProxyURL(p)
	}
	a := NewNamedConfig("a", &rest.Config{Host: "https://h", Proxy: proxy("http://proxy-1:3128")})
	b := NewNamedConfig("a", &rest.Config{Host: "https://h", Proxy: proxy("http://proxy-1:3128")})
	c := NewNamedConfig("a", &rest.Config{Host: "https://h", Proxy: proxy("http://proxy-2:3128")})
	d := NewNamedConfig("a", &rest.Config{Host: "https://h", Proxy: proxy("http://proxy-1:3128"), WrapTransport: func(rt http.RoundTripper) http.RoundTripper { return rt }})
	if a.Fingerprint() != b.Fingerprint() {
		t.Error("equal proxies differ")
	}
	if a.Fingerprint() == c.Fingerprint() {
		t.Error("another proxy address is not a change")
	}
	if a.Fingerprint() == d.Fingerprint() {
		t.Error("setting WrapTransport is not a change")
	}
	if NewNamedConfig("a", a.Config).Fingerprint() == NewNamedConfig("b", a.Config).Fingerprint() {
		t.Error("the name is not covered")
	}
}

func TestNamedConfigStringHasNoCredentials(t *testing.T) {
	nc := &NamedConfig{
		Name:   "prod",
		Config: &rest.Config{Host: "https://h", BearerToken: "super-secret", Password: "hunter22"},
		Source: Source{File: "/etc/kube/config", Context: "prod"},
	}
	s := nc.String()
	if s != "prod (file /etc/kube/config, context prod)" {
		t.Errorf("String() = %q", s)
	}
	if strings.Contains(s, "super-secret") || strings.Contains(s, "hunter22") || strings.Contains(nc.Fingerprint(), "super-secret") {
		t.Error("credentials leak")
	}
	if (*NamedConfig)(nil).String() != "<nil>" {
		t.Error("nil String")
	}
	if got := (Source{Object: "KubeFedCluster ns/x"}).String(); got != "KubeFedCluster ns/x" {
		t.Errorf("object source = %q", got)
	}
}

// Names, files and objects come from other people: a description quotes
// what could forge or hide a log line, and leaves the rest as it is.
func TestDescriptionsQuoteOddBytes(t *testing.T) {
	for _, tc := range []struct {
		nc   *NamedConfig
		want string
	}{
		{&NamedConfig{Name: "evil-\xff\xfe", Source: Source{Object: "Secret argocd/x"}}, `"evil-\xff\xfe" (Secret argocd/x)`},
		{&NamedConfig{Name: "a\u202eb"}, `"a\u202eb"`},
		{&NamedConfig{Name: "east", Source: Source{File: "/d/a\nb", Context: "east"}}, `east (file "/d/a\nb", context east)`},
		{&NamedConfig{Name: "east", Source: Source{File: "/d/\u202ekc"}}, `east (file "/d/\u202ekc")`},
		{&NamedConfig{Name: "my cluster", Source: Source{File: "/d/my kc", Context: "my cluster"}}, `my cluster (file /d/my kc, context my cluster)`},
	} {
		if got := tc.nc.String(); got != tc.want {
			t.Errorf("String() = %s, want %s", got, tc.want)
		}
	}
	fe := &FileError{Path: "/d/\u202ekc", Context: "a\x00b", Err: ErrNoContexts}
	if got, want := fe.Error(), `kubeconfig "/d/\u202ekc", context "a\x00b": kubeconfig has no contexts`; got != want {
		t.Errorf("FileError = %s, want %s", got, want)
	}
}

func TestPropertiesCountInFingerprintOnly(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:6443", BearerToken: "tok"}
	plain := NewNamedConfig("a", cfg)
	with := &NamedConfig{Name: "a", Config: cfg, Properties: map[string]string{"clusterset.k8s.io": "x", "cluster.clusterset.k8s.io": "id"}}
	// The same map built in another order: the digest does not depend on it.
	same := &NamedConfig{Name: "a", Config: cfg, Properties: map[string]string{"cluster.clusterset.k8s.io": "id", "clusterset.k8s.io": "x"}}
	other := &NamedConfig{Name: "a", Config: cfg, Properties: map[string]string{"clusterset.k8s.io": "y", "cluster.clusterset.k8s.io": "id"}}
	empty := &NamedConfig{Name: "a", Config: cfg, Properties: map[string]string{}}

	if plain.Fingerprint() == with.Fingerprint() || with.Fingerprint() == other.Fingerprint() {
		t.Error("a change of Properties left Fingerprint alone")
	}
	if with.Fingerprint() != same.Fingerprint() {
		t.Error("equal Properties gave different fingerprints")
	}
	if plain.Fingerprint() != empty.Fingerprint() {
		t.Error("empty Properties differ from none")
	}
	for _, c := range []*NamedConfig{with, other, empty} {
		if c.ReachFingerprint() != plain.ReachFingerprint() {
			t.Errorf("Properties %v changed ReachFingerprint", c.Properties)
		}
	}
	if plain.ReachFingerprint() != plain.Fingerprint() {
		t.Error("without Properties the two digests should agree")
	}
	rotated := &NamedConfig{Name: "a", Config: &rest.Config{Host: cfg.Host, BearerToken: "rotated"}, Properties: with.Properties}
	if rotated.ReachFingerprint() == with.ReachFingerprint() {
		t.Error("a rotated token left ReachFingerprint alone")
	}
}

func TestFingerprintCoversExecClusterInfo(t *testing.T) {
	withInfo := func(raw string) *NamedConfig {
		cfg := &rest.Config{Host: "https://127.0.0.1:6443", ExecProvider: &clientcmdapi.ExecConfig{
			Command: "plugin", APIVersion: "client.authentication.k8s.io/v1", ProvideClusterInfo: true,
		}}
		if raw != "" {
			cfg.ExecProvider.Config = &runtime.Unknown{Raw: []byte(raw)}
		}
		return NewNamedConfig("a", cfg)
	}
	none, one, other, again := withInfo(""), withInfo(`{"audience":"a"}`), withInfo(`{"audience":"b"}`), withInfo(`{"audience":"a"}`)
	if none.Fingerprint() == one.Fingerprint() || one.Fingerprint() == other.Fingerprint() {
		t.Error("a change of the exec extension left the fingerprint alone")
	}
	if one.Fingerprint() != again.Fingerprint() {
		t.Error("the same exec extension gave two fingerprints")
	}
}

// An exec plugin's policy (which commands client-go may run) and its stdin
// settings count: an allowlist tightened alone changes the fingerprint, so
// the running member is updated to it.
func TestFingerprintCoversExecPolicy(t *testing.T) {
	with := func(change func(*clientcmdapi.ExecConfig)) string {
		e := &clientcmdapi.ExecConfig{Command: "plugin", APIVersion: "client.authentication.k8s.io/v1"}
		change(e)
		return NewNamedConfig("a", &rest.Config{Host: "https://127.0.0.1:6443", ExecProvider: e}).Fingerprint()
	}
	base := with(func(*clientcmdapi.ExecConfig) {})
	for name, change := range map[string]func(*clientcmdapi.ExecConfig){
		"policy": func(e *clientcmdapi.ExecConfig) { e.PluginPolicy.PolicyType = clientcmdapi.PluginPolicyDenyAll },
		"allowlist": func(e *clientcmdapi.ExecConfig) {
			e.PluginPolicy = clientcmdapi.PluginPolicy{PolicyType: clientcmdapi.PluginPolicyAllowlist, Allowlist: []clientcmdapi.AllowlistEntry{{Command: "plugin"}}}
		},
		"stdin":         func(e *clientcmdapi.ExecConfig) { e.StdinUnavailable = true },
		"stdin message": func(e *clientcmdapi.ExecConfig) { e.StdinUnavailableMessage = "no stdin here" },
	} {
		if with(change) == base {
			t.Errorf("a change of the exec plugin's %s left the fingerprint alone", name)
		}
	}
}
