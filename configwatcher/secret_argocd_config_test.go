package configwatcher

import (
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/testcert"
)

// argoCDSecretData is an Argo CD cluster Secret's data with config as its
// "config" JSON.
func argoCDSecretData(t *testing.T, name, server string, config map[string]any) map[string][]byte {
	t.Helper()
	b, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{argoCDNameKey: []byte(name), argoCDServerKey: []byte(server), argoCDConfigKey: b}
}

// credentialServer is an API server stand-in that records the
// Authorization header of each request.
type credentialServer struct {
	*httptest.Server
	mu   sync.Mutex
	auth []string
}

func newCredentialServer(t *testing.T) *credentialServer {
	t.Helper()
	s := &credentialServer{}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"37"}`))
	}))
	t.Cleanup(s.Close)
	return s
}

// caPEM is the server's certificate, as a Secret's caData holds it.
func (s *credentialServer) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
}

// authorization sends one request with cfg and returns the Authorization
// header the server got.
func (s *credentialServer) authorization(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(s.URL + "/version")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.auth[len(s.auth)-1]
}

// execPlugin writes a plugin that answers with a token of its own: "right"
// when the cluster info it is handed (KUBERNETES_EXEC_INFO) carries want,
// "no-cluster-info" when it has none, "wrong" otherwise.
func execPlugin(t *testing.T, want string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "plugin.sh")
	script := `#!/bin/sh
case "$KUBERNETES_EXEC_INFO" in
  *'` + want + `'*) token=right ;;
  *'"cluster"'*) token=wrong ;;
  *) token=no-cluster-info ;;
esac
printf '{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"%s"}}\n' "$token"
`
	if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return path
}

// A plugin (execProviderConfig or awsAuthConfig) says who the client is,
// whatever static credentials the Secret also carries, as Argo CD reads it:
// the static ones are not sent, so that client-go runs the plugin (it runs
// none while a token or basic auth is set).
func TestArgoCDPluginLeavesStaticCredentials(t *testing.T) {
	statics := map[string]map[string]any{
		"token":           {"bearerToken": "stale-token"},
		"basic":           {"username": "admin", "password": "stale-password"},
		"token and basic": {"bearerToken": "stale-token", "username": "admin", "password": "stale-password"},
	}
	plugins := map[string]struct {
		config  map[string]any
		command string
	}{
		"exec":                    {map[string]any{"execProviderConfig": map[string]any{"command": "/opt/auth", "apiVersion": "client.authentication.k8s.io/v1beta1"}}, "/opt/auth"},
		"aws":                     {map[string]any{"awsAuthConfig": map[string]any{"clusterName": "prod"}}, "aws"},
		"aws and exec, aws first": {map[string]any{"awsAuthConfig": map[string]any{"clusterName": "prod"}, "execProviderConfig": map[string]any{"command": "/opt/auth"}}, "aws"},
	}
	for sname, static := range statics {
		for pname, plugin := range plugins {
			t.Run(sname+"/"+pname, func(t *testing.T) {
				c := map[string]any{"tlsClientConfig": map[string]any{"insecure": false}}
				maps.Copy(c, static)
				maps.Copy(c, plugin.config)
				_, cfg, err := argoCDConfig(argoCDSecretData(t, "east", "https://east.example.com", c), true, nil)
				if err != nil {
					t.Fatal(err)
				}
				if cfg.BearerToken != "" || cfg.Username != "" || cfg.Password != "" {
					t.Errorf("static credentials kept beside the plugin: token %t, username %t, password %t", cfg.BearerToken != "", cfg.Username != "", cfg.Password != "")
				}
				if cfg.ExecProvider == nil || cfg.ExecProvider.Command != plugin.command {
					t.Errorf("plugin = %+v, want command %q", cfg.ExecProvider, plugin.command)
				}
			})
		}
	}
	t.Run("without a plugin the static credentials are used", func(t *testing.T) {
		_, cfg, err := argoCDConfig(argoCDSecretData(t, "east", "https://east.example.com", statics["token and basic"]), true, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.BearerToken != "stale-token" || cfg.Username != "admin" || cfg.Password != "stale-password" || cfg.ExecProvider != nil {
			t.Errorf("got token %t, username %q, password %t, plugin %v", cfg.BearerToken != "", cfg.Username, cfg.Password != "", cfg.ExecProvider)
		}
	})

	// What the API server gets: the plugin's token, not the one left over.
	srv := newCredentialServer(t)
	_, cfg, err := argoCDConfig(argoCDSecretData(t, "east", srv.URL, map[string]any{
		"bearerToken":        "stale-token",
		"tlsClientConfig":    map[string]any{"caData": srv.caPEM()},
		"execProviderConfig": map[string]any{"command": execPlugin(t, "unused"), "apiVersion": "client.authentication.k8s.io/v1beta1"},
	}), true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.authorization(t, cfg); got != "Bearer no-cluster-info" {
		t.Errorf("the API server got %q, want the plugin's token", got)
	}
}

// execProviderConfig's provideClusterInfo and config (Argo CD 3.5) reach the
// plugin: it gets the cluster, with config as the cluster's exec extension.
func TestArgoCDExecClusterInfo(t *testing.T) {
	exec := func(extra map[string]any) map[string]any {
		e := map[string]any{"command": "/opt/auth", "apiVersion": "client.authentication.k8s.io/v1beta1"}
		maps.Copy(e, extra)
		return map[string]any{"execProviderConfig": e}
	}
	for _, tc := range []struct {
		name       string
		extra      map[string]any
		wantInfo   bool
		wantConfig string
	}{
		{"both", map[string]any{"provideClusterInfo": true, "config": map[string]any{"clusterName": "prod-eu"}}, true, `{"clusterName":"prod-eu"}`},
		{"info alone", map[string]any{"provideClusterInfo": true}, true, ""},
		{"config alone", map[string]any{"config": map[string]any{"clusterName": "prod-eu"}}, false, `{"clusterName":"prod-eu"}`},
		{"config null", map[string]any{"provideClusterInfo": true, "config": nil}, true, ""},
		{"neither", nil, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, cfg, err := argoCDConfig(argoCDSecretData(t, "prod-eu", "https://prod-eu.example.com", exec(tc.extra)), true, nil)
			if err != nil {
				t.Fatal(err)
			}
			ep := cfg.ExecProvider
			if ep.ProvideClusterInfo != tc.wantInfo {
				t.Errorf("ProvideClusterInfo = %t, want %t", ep.ProvideClusterInfo, tc.wantInfo)
			}
			got := ""
			if ep.Config != nil {
				u, ok := ep.Config.(*runtime.Unknown)
				if !ok || u.ContentType != runtime.ContentTypeJSON {
					t.Fatalf("Config = %#v, want JSON", ep.Config)
				}
				got = string(u.Raw)
			}
			if got != tc.wantConfig {
				t.Errorf("Config = %q, want %q", got, tc.wantConfig)
			}
		})
	}

	t.Run("a change of config alone is a change of the cluster's config", func(t *testing.T) {
		fingerprint := func(name string) string {
			_, cfg, err := argoCDConfig(argoCDSecretData(t, "prod-eu", "https://prod-eu.example.com", exec(map[string]any{"provideClusterInfo": true, "config": map[string]any{"clusterName": name}})), true, nil)
			if err != nil {
				t.Fatal(err)
			}
			return (&config.NamedConfig{Name: "prod-eu", Config: cfg}).Fingerprint()
		}
		if fingerprint("a") == fingerprint("b") {
			t.Error("two exec configs differing in their cluster config have the same fingerprint")
		}
	})

	// What the plugin gets: the cluster, with the Secret's config.
	srv := newCredentialServer(t)
	for _, tc := range []struct {
		name  string
		extra map[string]any
		want  string
	}{
		{"with cluster info", map[string]any{"provideClusterInfo": true, "config": map[string]any{"clusterName": "prod-eu"}}, "Bearer right"},
		{"without", map[string]any{"config": map[string]any{"clusterName": "prod-eu"}}, "Bearer no-cluster-info"},
	} {
		t.Run("plugin "+tc.name, func(t *testing.T) {
			c := exec(tc.extra)
			c["execProviderConfig"].(map[string]any)["command"] = execPlugin(t, `"clusterName":"prod-eu"`)
			c["tlsClientConfig"] = map[string]any{"caData": srv.caPEM()}
			_, cfg, err := argoCDConfig(argoCDSecretData(t, "prod-eu", srv.URL, c), true, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := srv.authorization(t, cfg); got != tc.want {
				t.Errorf("the API server got %q, want %q", got, tc.want)
			}
		})
	}
}

// proxyUrl and disableCompression apply to every cluster, the one Argo CD
// runs in included, as Argo CD applies them; a proxyUrl Argo CD refuses is
// the Secret's error.
func TestArgoCDProxyAndCompression(t *testing.T) {
	host := &rest.Config{Host: "https://10.96.0.1:443", BearerToken: "host-token", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca")}}
	servers := map[string]struct {
		server string
		static map[string]any
	}{
		"remote":                        {"https://east.example.com", map[string]any{"bearerToken": "t"}},
		"in-cluster":                    {ArgoCDInClusterServer, nil},
		"in-cluster with its own token": {ArgoCDInClusterServer + "/", map[string]any{"bearerToken": "t"}},
	}
	for sname, s := range servers {
		c := func(extra map[string]any) map[string]any {
			m := map[string]any{"tlsClientConfig": map[string]any{"insecure": false}}
			maps.Copy(m, s.static)
			maps.Copy(m, extra)
			return m
		}
		for _, proxy := range []string{"http://proxy.corp:3128", "https://proxy.corp", "socks5://proxy.corp:1080"} {
			t.Run(sname+"/"+proxy, func(t *testing.T) {
				_, cfg, err := argoCDConfig(argoCDSecretData(t, "east", s.server, c(map[string]any{"proxyUrl": proxy, "disableCompression": true})), true, host)
				if err != nil {
					t.Fatal(err)
				}
				if cfg.Proxy == nil {
					t.Fatal("proxyUrl not applied")
				}
				u, err := cfg.Proxy(&http.Request{URL: &url.URL{Scheme: "https", Host: "east.example.com"}})
				if err != nil || u == nil || u.String() != proxy {
					t.Errorf("proxy = %v, %v; want %s", u, err, proxy)
				}
				if !cfg.DisableCompression {
					t.Error("disableCompression not applied")
				}
			})
		}
		t.Run(sname+"/none", func(t *testing.T) {
			_, cfg, err := argoCDConfig(argoCDSecretData(t, "east", s.server, c(nil)), true, host)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Proxy != nil || cfg.DisableCompression {
				t.Errorf("proxy set %t, compression disabled %t; want neither", cfg.Proxy != nil, cfg.DisableCompression)
			}
		})
		for _, bad := range []string{"ftp://proxy.corp:21", "proxy.corp:3128", "http://", "socks4://proxy.corp:1080", "http://user:hunter2@[::1"} {
			t.Run(sname+"/refused "+bad, func(t *testing.T) {
				name, cfg, err := argoCDConfig(argoCDSecretData(t, "east", s.server, c(map[string]any{"proxyUrl": bad})), true, host)
				if !errors.Is(err, ErrSecretInvalid) || !strings.Contains(err.Error(), "proxyUrl") || cfg != nil || name != "east" {
					t.Fatalf("got %q, %v, %v; want the Secret's proxyUrl error for cluster east", name, cfg, err)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Errorf("the error quotes the proxy's password: %v", err)
				}
			})
		}
	}
}

// TestArgoCDInClusterSharesNothing: the in-cluster member's config shares
// neither the host config's RateLimiter (each member limits itself by its
// own QPS and Burst) nor its ExecProvider (client-go writes into the
// ExecProvider of a config it copies, so a shared one is a data race
// between the published configs).
func TestArgoCDInClusterSharesNothing(t *testing.T) {
	execCfg := &runtime.Unknown{Raw: []byte(`{"audience":"host"}`), ContentType: runtime.ContentTypeJSON}
	host := &rest.Config{
		Host:        "https://10.96.0.1:443",
		QPS:         20,
		Burst:       40,
		RateLimiter: flowcontrol.NewTokenBucketRateLimiter(5, 10),
		ExecProvider: &clientcmdapi.ExecConfig{
			Command:         "host-token",
			APIVersion:      "client.authentication.k8s.io/v1",
			Config:          execCfg,
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
		},
	}
	exec := host.ExecProvider
	for sname, static := range map[string]map[string]any{
		"host credentials": nil,
		"own token":        {"bearerToken": "t"},
	} {
		t.Run(sname, func(t *testing.T) {
			c := map[string]any{"tlsClientConfig": map[string]any{"insecure": false}}
			maps.Copy(c, static)
			_, cfg, err := argoCDConfig(argoCDSecretData(t, "in-cluster", ArgoCDInClusterServer, c), false, host)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.RateLimiter != nil {
				t.Error("the member shares the host config's RateLimiter")
			}
			if cfg.QPS != host.QPS || cfg.Burst != host.Burst {
				t.Errorf("QPS, Burst = %v, %d; want the host's %v, %d", cfg.QPS, cfg.Burst, host.QPS, host.Burst)
			}
			if host.ExecProvider != exec || exec.Config != execCfg {
				t.Error("reading the Secret changed the host config's ExecProvider")
			}
			if static != nil {
				if cfg.ExecProvider != nil {
					t.Error("a Secret with its own token still runs the host's exec plugin")
				}
				return
			}
			if cfg.ExecProvider == nil {
				t.Fatal("the member lost the host config's exec plugin")
			}
			if cfg.ExecProvider == exec || cfg.ExecProvider.Config == exec.Config {
				t.Error("the member shares the host config's ExecProvider")
			}
			if cfg.ExecProvider.Command != exec.Command {
				t.Errorf("exec command %q, want the host's %q", cfg.ExecProvider.Command, exec.Command)
			}
			// What client-go does to a config it copies, and what races
			// if the ExecProvider is shared.
			_ = rest.CopyConfig(cfg)
			if exec.Config != execCfg {
				t.Error("copying the member's config wrote into the host config's ExecProvider")
			}
		})
	}
}

// TestArgoCDShardAsArgoCD: the shard is read as Argo CD reads it
// (strconv.Atoi of the value as written): one with spaces or a line break
// around it is no shard, as Argo CD ignores it.
func TestArgoCDShardAsArgoCD(t *testing.T) {
	for shard, want := range map[string]string{
		"1": "1", "0": "0", "+2": "2", "-1": "-1", "007": "7",
		"1\n": "", " 1": "", "1 ": "", "\t1": "", "one": "", "1.0": "", "": "",
	} {
		s := &corev1.Secret{Data: map[string][]byte{argoCDShardKey: []byte(shard)}}
		if got := argoCDProperties(s, nil)[ArgoCDShardProperty]; got != want {
			t.Errorf("shard %q: property %q, want %q", shard, got, want)
		}
	}
}

// TestArgoCDInClusterServerAsWritten: only the server Argo CD compares
// equal to its in-cluster address (as written, but for trailing slashes)
// gets the watcher's own credentials; one with a space or line break
// around it is an ordinary server, reached with the Secret's config.
func TestArgoCDInClusterServerAsWritten(t *testing.T) {
	host := &rest.Config{Host: "https://10.96.0.1:443", BearerToken: "host-token"}
	for _, server := range []string{ArgoCDInClusterServer, ArgoCDInClusterServer + "/", ArgoCDInClusterServer + "//"} {
		_, cfg, err := argoCDConfig(argoCDSecretData(t, "in", server, map[string]any{}), false, host)
		if err != nil || cfg.BearerToken != host.BearerToken || cfg.Host != host.Host {
			t.Errorf("server %q: got %v, %v; want the host config", server, cfg, err)
		}
	}
	for _, server := range []string{ArgoCDInClusterServer + "\n", " " + ArgoCDInClusterServer, ArgoCDInClusterServer + " ", ArgoCDInClusterServer + "/\n"} {
		_, cfg, err := argoCDConfig(argoCDSecretData(t, "in", server, map[string]any{"bearerToken": "secret-token"}), false, host)
		if err != nil {
			t.Errorf("server %q: %v", server, err)
			continue
		}
		if cfg.Host == host.Host || cfg.BearerToken != "secret-token" {
			t.Errorf("server %q: reached at %s with the host's credentials %t; want the Secret's server and token", server, cfg.Host, cfg.BearerToken == host.BearerToken)
		}
	}
}

// TestArgoCDNoConfig: a Secret of an outside server without "config" (or
// with an empty one) is read as one with "{}", as Argo CD reads it (it
// parses the config only when there is one): the server, reached with no
// credentials.
func TestArgoCDNoConfig(t *testing.T) {
	host := &rest.Config{Host: "https://10.96.0.1:443", BearerToken: "host-token"}
	_, empty, err := argoCDConfig(argoCDSecretData(t, "east", "https://east.example.com", map[string]any{}), false, host)
	if err != nil {
		t.Fatal(err)
	}
	for what, raw := range map[string][]byte{"no config": nil, "an empty config": {}, "a blank config": []byte(" \n")} {
		data := argoCDSecretData(t, "east", "https://east.example.com", nil)
		if raw == nil {
			delete(data, argoCDConfigKey)
		} else {
			data[argoCDConfigKey] = raw
		}
		name, cfg, err := argoCDConfig(data, false, host)
		if err != nil || name != "east" {
			t.Errorf("%s: %q, %v; want cluster east", what, name, err)
			continue
		}
		if cfg.Host != "https://east.example.com" || cfg.BearerToken != "" || cfg.Username != "" || cfg.ExecProvider != nil {
			t.Errorf("%s: %s; want the server, no credentials", what, (&config.NamedConfig{Name: name, Config: cfg}).Redacted())
		}
		if (&config.NamedConfig{Name: name, Config: cfg}).Fingerprint() != (&config.NamedConfig{Name: name, Config: empty}).Fingerprint() {
			t.Errorf("%s: a config other than the one \"{}\" gives", what)
		}
	}
}

// TestArgoCDAnnotationsCarryNoCredentials: annotations become properties,
// which Status and the fleet page show, but none that carries the
// Secret's credentials: a copy of the Secret another tool keeps in an
// annotation (its data base64 as stored, or its stringData, JSON or YAML),
// or the token, password or client key on their own. Other annotations
// are kept.
func TestArgoCDAnnotationsCarryNoCredentials(t *testing.T) {
	const token, password = "s3cr3t-t0ken-value", "hunter2-password"
	certPEM, keyPEM := testcert.SelfSigned(t)
	for _, tc := range []struct {
		what   string
		config map[string]any
		leaks  []string // what must not reach a property
	}{
		{"token", map[string]any{"bearerToken": token, "tlsClientConfig": map[string]any{"insecure": true}}, []string{token}},
		{"basic auth", map[string]any{"username": "admin", "password": password, "tlsClientConfig": map[string]any{"insecure": true}}, []string{password}},
		{"client key", map[string]any{"tlsClientConfig": map[string]any{"insecure": true, "certData": base64.StdEncoding.EncodeToString(certPEM), "keyData": base64.StdEncoding.EncodeToString(keyPEM)}}, []string{string(keyPEM), base64.StdEncoding.EncodeToString(keyPEM)}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			data := argoCDSecretData(t, "prod", "https://prod.example:6443", tc.config)
			stored := map[string]string{}
			for k, v := range data {
				stored[k] = base64.StdEncoding.EncodeToString(v)
			}
			copyOf := func(v any) string {
				b, err := json.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}
			annotations := map[string]string{
				"team":                 "payments",
				"example.com/original": copyOf(map[string]any{"apiVersion": "v1", "kind": "Secret", "data": stored}),
				"example.com/applied":  copyOf(map[string]any{"apiVersion": "v1", "kind": "Secret", "stringData": map[string]string{"config": string(data[argoCDConfigKey])}}),
				"example.com/yaml":     "kind: Secret\nstringData:\n  config: " + string(data[argoCDConfigKey]) + "\n",
			}
			for i, leak := range tc.leaks {
				annotations[fmt.Sprint("example.com/alone-", i)] = leak
				annotations[fmt.Sprint("example.com/within-", i)] = "prefix " + leak + " suffix"
			}
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}, Data: data}
			_, cfg, err := argoCDConfig(data, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			props := argoCDProperties(s, cfg)
			if props[ArgoCDAnnotationPropertyPrefix+"team"] != "payments" {
				t.Errorf("the team annotation was not kept: %v", props)
			}
			for k, v := range props {
				for _, leak := range append(tc.leaks, stored[argoCDConfigKey]) {
					if strings.Contains(v, leak) {
						t.Errorf("property %s carries a credential", k)
					}
				}
			}
			if len(props) != 1 {
				t.Errorf("properties %v, want only the team annotation", slices.Sorted(maps.Keys(props)))
			}
		})
	}
}
