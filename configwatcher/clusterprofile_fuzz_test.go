package configwatcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/mccr-dev/mccr/apis/clusterinventory"
	"github.com/mccr-dev/mccr/internal/fuzzcheck"
)

// fuzzPluginCommand is the command of every provider of the fuzz targets: a
// profile never chooses another.
const fuzzPluginCommand = "/usr/local/bin/fuzz-plugin"

// fuzzProviders are the operator's access providers a fuzzed profile may
// list: one that lets a profile add nothing, and ones that let it add
// arguments and environment variables.
func fuzzProviders() []AccessProvider {
	exec := func() *clientcmdapi.ExecConfig {
		return &clientcmdapi.ExecConfig{
			Command:            fuzzPluginCommand,
			Args:               []string{"--fleet"},
			Env:                []clientcmdapi.ExecEnvVar{{Name: "OPERATOR_SET", Value: fuzzcheck.EnvValue}},
			APIVersion:         "client.authentication.k8s.io/v1",
			ProvideClusterInfo: true,
		}
	}
	return []AccessProvider{
		{Name: "strict", ExecConfig: exec()},
		{Name: "open", ExecConfig: exec(), ProfileSourcedCLIArgsPolicy: AccessPolicyAppend, ProfileSourcedEnvVarsPolicy: AccessPolicyReplace, AllowedProfileEnvVars: []string{"AWS_REGION"}},
		{Name: "keep", ExecConfig: exec(), ProfileSourcedEnvVarsPolicy: AccessPolicyAppendIfNotExists},
	}
}

// FuzzClusterProfile fuzzes a ClusterProfile's status (conditions,
// properties, accessProviders and credentialProviders with their cluster:
// server, certificate-authority-data, proxy-url, extensions) and name,
// read by each naming function, published healthy or not, as v1alpha1 or
// (mode&16) v1alpha2. See fuzz_test.go for what is checked; besides, a
// config always runs the provider's own command and sends no credential
// but the plugin's.
func FuzzClusterProfile(f *testing.F) {
	// v1alpha2 as cluster managers write it: metav1.Conditions, Joined
	// among them, a property with its lastObservedTime, the exec extension.
	f.Add("member", []byte(`{"conditions":[{"type":"ControlPlaneHealthy","status":"True","reason":"Healthy","message":"ok","lastTransitionTime":"2026-01-01T00:00:00Z","observedGeneration":1},{"type":"Joined","status":"True","reason":"Joined","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}],"version":{"kubernetes":"v1.37.1"},"properties":[{"name":"clusterset.k8s.io/cluster-id","value":"c-1","lastObservedTime":"2026-01-01T00:00:00Z"}],"accessProviders":[{"name":"strict","cluster":{"server":"https://127.0.0.1:6443","extensions":[{"name":"client.authentication.k8s.io/exec","extension":{"clusterName":"member"}}]}}]}`), uint8(16))
	// Joined False: the cluster left its inventory; not published.
	f.Add("member", []byte(`{"conditions":[{"type":"ControlPlaneHealthy","status":"True"},{"type":"Joined","status":"False"}],"accessProviders":[{"name":"strict","cluster":{"server":"https://127.0.0.1:6443"}}]}`), uint8(16|8))
	// A status property posing as a label's.
	f.Add("member", []byte(`{"conditions":[{"type":"ControlPlaneHealthy","status":"True"}],"properties":[{"name":"label:x-k8s.io/cluster-manager","value":"forged"}],"accessProviders":[{"name":"strict","cluster":{"server":"https://127.0.0.1:6443"}}]}`), uint8(16))
	f.Add("member", []byte(`{"conditions":[{"type":"ControlPlaneHealthy","status":"True"}],"accessProviders":[{"name":"strict","cluster":{"server":"https://127.0.0.1:6443"}}]}`), uint8(0))
	f.Add("member", []byte(`{"properties":[{"name":"cluster.clusterset.k8s.io","value":"evil-\xff\xfe"}],"accessProviders":[{"name":"strict","cluster":{"server":"https://127.0.0.1:6443"}}]}`), uint8(6))
	f.Add("member", []byte(`{"accessProviders":[{"name":"open","cluster":{"server":"https://admin:`+fuzzcheck.Password+`@h","extensions":[{"name":"`+ClusterProfileEnvExtension+`","extension":{"LD_PRELOAD":"`+fuzzcheck.EnvValue+`","OK":"`+fuzzcheck.Token+`"}},{"name":"`+ClusterProfileArgsExtension+`","extension":["--x","\u0000"]}]}}]}`), uint8(4))
	f.Fuzz(func(t *testing.T, name string, status []byte, mode uint8) {
		var st any
		if json.Unmarshal(status, &st) != nil {
			return // the host stores JSON
		}
		version := clusterinventory.V1Alpha1
		if mode&16 != 0 {
			version = clusterinventory.V1Alpha2
		}
		u := newClusterProfileObject(version)
		u.SetNamespace("fleet")
		u.SetName(objectName(name, "member"))
		u.Object["status"] = st
		if _, err := clusterProfileTransform(u); err != nil {
			t.Fatal(err)
		}
		names := []ClusterProfileNameFunc{DefaultClusterProfileName, ClusterProfileObjectName, ClusterProfileClusterID}
		w := &ClusterProfileWatcher{
			hostCache: fuzzHost(nil),
			opts: ClusterProfileOptions{
				Providers: fuzzProviders(), Name: names[int(mode)%len(names)],
				PublishUnhealthy: mode&4 != 0,
			},
			claimed: newClaimsState(),
			names:   map[string]string{}, serving: map[string]string{}, members: map[string]string{},
		}
		w.opts.applyDefaults()
		ref := u.GetNamespace() + "/" + u.GetName()
		serving := map[string]bool{ref: mode&8 != 0}

		c := w.claim(u, serving)

		l := newLeakCheck(ref)
		l.profile(status)
		if c == nil {
			return
		}
		if c.ref != ref || c.id != ref {
			t.Fatalf("claim of %s: ref %q, id %q", ref, c.ref, c.id)
		}
		o := objectClaim{
			source: "ClusterProfile " + ref, name: c.name, cfg: c.cfg, err: c.err,
			sentinels: []error{ErrClusterProfileInvalid, ErrClusterProfileNoAccessProvider},
			plugins:   true,
		}
		o.check(t, l)
		if c.cfg != nil {
			cfg := c.cfg.Config
			if e := cfg.ExecProvider; e == nil || e.Command != fuzzPluginCommand || e.Env[0].Name != "OPERATOR_SET" {
				t.Fatalf("%s: the profile chose the plugin: %+v", ref, e)
			}
			if cfg.BearerToken != "" || cfg.Username != "" || cfg.Password != "" || len(cfg.CertData) > 0 || len(cfg.KeyData) > 0 || cfg.Insecure {
				t.Fatalf("%s: credentials or trust the profile chose", ref)
			}
		}
		publishClaims(t, &w.hostCache, c)
		published(t, w.pub, l, o)
	})
}

// FuzzClusterProfileLabels fuzzes a v1alpha2 ClusterProfile's labels (as
// a JSON object: keys and values of any bytes, the member ID among them)
// over a status that makes it a cluster. Whatever the labels: nothing
// panics; a published config's Properties hold each label under
// LabelPropertyPrefix only if its value is UTF-8 and at most 4 KiB, at most
// 128 of them, and no status property under that prefix; status properties
// are bounded the same way; the cluster's
// name is the member ID when there is one; the checks of fuzz_test.go hold.
func FuzzClusterProfileLabels(f *testing.F) {
	status := []byte(`{"conditions":[{"type":"ControlPlaneHealthy","status":"True"},{"type":"Joined","status":"True"}],"properties":[{"name":"label:team","value":"forged"},{"name":"region","value":"eu"}],"accessProviders":[{"name":"strict","cluster":{"server":"https://127.0.0.1:6443"}}]}`)
	f.Add([]byte(`{"multicluster.x-k8s.io/inventory-member-id":"prod-1","x-k8s.io/cluster-manager":"ocm","team":"a"}`), status)
	f.Add([]byte(`{"team":"evil\n\u202e\u0000","bad":"\udcff"}`), status)
	f.Add([]byte(`{"big":"`+strings.Repeat("x", 4097)+`","fits":"`+strings.Repeat("y", 4096)+`"}`), status)
	many := map[string]string{}
	for i := range 200 {
		many[fmt.Sprintf("k%03d", i)] = "v"
	}
	raw, err := json.Marshal(many)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw, status)
	f.Add([]byte(`{"multicluster.x-k8s.io/inventory-member-id":"../../etc"}`), status)
	// Status properties past the bounds: too long, not UTF-8, too many.
	props := make([]map[string]string, 0, 202)
	props = append(props, map[string]string{"name": "big", "value": strings.Repeat("x", 4097)}, map[string]string{"name": "bad", "value": "\xff"})
	for i := range 200 {
		props = append(props, map[string]string{"name": fmt.Sprintf("p%03d", i), "value": "v"})
	}
	var st map[string]any
	if err := json.Unmarshal(status, &st); err != nil {
		f.Fatal(err)
	}
	st["properties"] = props
	bounded, err := json.Marshal(st)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{"team":"a"}`), bounded)
	f.Fuzz(func(t *testing.T, labels, status []byte) {
		var lbls map[string]string
		var st any
		if json.Unmarshal(labels, &lbls) != nil || json.Unmarshal(status, &st) != nil {
			return // the host stores JSON
		}
		u := newClusterProfileObject(clusterinventory.V1Alpha2)
		u.SetNamespace("fleet")
		u.SetName("member")
		u.SetLabels(lbls)
		u.Object["status"] = st
		if _, err := clusterProfileTransform(u); err != nil {
			t.Fatal(err)
		}
		w := &ClusterProfileWatcher{
			hostCache: fuzzHost(nil),
			opts:      ClusterProfileOptions{Providers: fuzzProviders()},
			claimed:   newClaimsState(),
			names:     map[string]string{}, serving: map[string]string{}, members: map[string]string{},
		}
		w.opts.applyDefaults()
		c := w.claim(u, nil)
		l := newLeakCheck("fleet/member")
		l.profile(status)
		for k, v := range lbls {
			l.public = append(l.public, k, v)
		}
		if c == nil {
			return
		}
		if id := lbls[clusterinventory.LabelInventoryMemberID]; id != "" && c.name != id {
			t.Fatalf("member ID %q, cluster name %q", id, c.name)
		}
		if c.cfg != nil {
			n := 0
			for k, v := range c.cfg.Properties {
				key, ok := strings.CutPrefix(k, LabelPropertyPrefix)
				if !ok {
					continue
				}
				n++
				if lv, ok := lbls[key]; !ok || lv != v || !utf8.ValidString(v) || len(v) > 4096 {
					t.Fatalf("property %q=%q: label %q (present %v)", k, v, lv, ok)
				}
			}
			if n > 128 {
				t.Fatalf("%d label properties", n)
			}
			// Status properties are bounded the same way.
			n = 0
			for k, v := range c.cfg.Properties {
				if strings.HasPrefix(k, LabelPropertyPrefix) || k == ClusterProfileProperty {
					continue
				}
				n++
				if !utf8.ValidString(v) || len(v) > 4096 {
					t.Fatalf("status property %q of %d bytes", k, len(v))
				}
			}
			if n > 128 {
				t.Fatalf("%d status properties", n)
			}
		}
		o := objectClaim{
			source: "ClusterProfile fleet/member", name: c.name, cfg: c.cfg, err: c.err,
			sentinels: []error{ErrClusterProfileInvalid, ErrClusterProfileNoAccessProvider},
			plugins:   true,
		}
		o.check(t, l)
		publishClaims(t, &w.hostCache, c)
		published(t, w.pub, l, o)
	})
}

// profile adds what a profile's status holds, as far as it decodes: the
// userinfo of its servers and proxies, and the values of the environment
// variables it asks for, are secret.
func (l *leakCheck) profile(status []byte) {
	var st clusterProfileStatus
	_ = json.Unmarshal(status, &st)
	for _, p := range st.Properties {
		l.public = append(l.public, p.Name, p.Value)
	}
	for _, pa := range append(st.AccessProviders, st.CredentialProviders...) {
		l.public = append(l.public, pa.Name, pa.Cluster.TLSServerName, pa.Cluster.CertificateAuthority)
		l.url(strings.TrimSpace(pa.Cluster.Server))
		l.url(pa.Cluster.ProxyURL)
		for _, e := range pa.Cluster.Extensions {
			l.public = append(l.public, e.Name)
			var env map[string]string
			if e.Name == ClusterProfileEnvExtension && json.Unmarshal(e.Extension, &env) == nil {
				for k, v := range env {
					l.public = append(l.public, k)
					l.secrets = append(l.secrets, v)
				}
			}
		}
	}
}

// FuzzAccessProviders fuzzes the operator's access-providers file, read by
// LoadAccessProviders. Whatever the file, nothing panics; an error wraps
// ErrAccessProvidersInvalid, names the file and quotes no value of a
// plugin's environment; providers returned are complete.
func FuzzAccessProviders(f *testing.F) {
	f.Add([]byte(`{"providers":[{"name":"secretreader","execConfig":{"apiVersion":"client.authentication.k8s.io/v1","command":"/bin/p","env":[{"name":"K","value":"` + fuzzcheck.EnvValue + `"}]}}]}`))
	f.Add([]byte("providers:\n- name: a\n  execConfig: {apiVersion: client.authentication.k8s.io/v1beta1, command: p, env: [{name: K, value: " + fuzzcheck.EnvValue + "}]}\n  profileSourcedEnvVarsPolicy: Replace\n  allowedProfileEnvVars: [AWS_REGION]\n"))
	f.Add([]byte(`{"providers":[{"name":"a","execConfig":{"apiVersion":"v9","command":"p","env":[{"name":"K","value":5}]}}]}`))
	path := filepath.Join(f.TempDir(), "providers.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		ps, err := LoadAccessProviders(path)
		l := newLeakCheck(path)
		var loose accessProvidersFile
		_ = yaml.Unmarshal(data, &loose) // as LoadAccessProviders reads it, less strictly
		for _, p := range loose.Providers {
			l.public = append(l.public, p.Name)
			if p.ExecConfig != nil {
				l.public = append(l.public, p.ExecConfig.Command, p.ExecConfig.APIVersion)
				for _, e := range p.ExecConfig.Env {
					l.public = append(l.public, e.Name)
					l.secrets = append(l.secrets, e.Value)
				}
			}
		}
		if err != nil {
			if ps != nil {
				t.Fatalf("providers and an error: %v", err)
			}
			if !strings.Contains(err.Error(), path) || !errors.Is(err, ErrAccessProvidersInvalid) {
				t.Fatalf("error does not name the file or wrap ErrAccessProvidersInvalid: %v", err)
			}
			if s, ok := fuzzcheck.Leak(err.Error(), l.secrets, l.public); ok {
				t.Fatalf("error quotes %q: %v", s, err)
			}
			return
		}
		for _, p := range ps {
			if strings.TrimSpace(p.Name) == "" || p.ExecConfig == nil || strings.TrimSpace(p.ExecConfig.Command) == "" {
				t.Fatalf("incomplete provider accepted: %+v", p)
			}
			if _, err := p.execWith(nil, func() []string { return nil }); err != nil {
				t.Fatalf("provider %q: %v", p.Name, err)
			}
		}
	})
}
