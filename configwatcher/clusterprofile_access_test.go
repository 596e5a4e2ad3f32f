package configwatcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// What a profile's extensions add to the operator's exec plugin, under
// each policy; the rest of the plugin is the operator's.
func TestAccessProviderExecFor(t *testing.T) {
	base := &clientcmdapi.ExecConfig{
		Command:    "/bin/plugin",
		Args:       []string{"--fixed"},
		Env:        []clientcmdapi.ExecEnvVar{{Name: "B", Value: "operator"}, {Name: "A", Value: "operator"}},
		APIVersion: "client.authentication.k8s.io/v1",
	}
	exts := map[string]json.RawMessage{
		ClusterExecExtension:        json.RawMessage(`{"audience":"x","command":"/bin/false"}`),
		ClusterProfileArgsExtension: json.RawMessage(`["--tenant","t1"]`),
		ClusterProfileEnvExtension:  json.RawMessage(`{"B":"profile","C":"profile"}`),
	}
	for _, c := range []struct {
		name       string
		args, envs AccessPolicy
		wantArgs   []string
		wantEnv    []clientcmdapi.ExecEnvVar
	}{
		{"Ignore", "", AccessPolicyIgnore, []string{"--fixed"},
			[]clientcmdapi.ExecEnvVar{{Name: "B", Value: "operator"}, {Name: "A", Value: "operator"}}},
		{"AppendIfNotExists", AccessPolicyAppend, AccessPolicyAppendIfNotExists, []string{"--fixed", "--tenant", "t1"},
			[]clientcmdapi.ExecEnvVar{{Name: "A", Value: "operator"}, {Name: "B", Value: "operator"}, {Name: "C", Value: "profile"}}},
		{"Replace", AccessPolicyIgnore, AccessPolicyReplace, []string{"--fixed"},
			[]clientcmdapi.ExecEnvVar{{Name: "A", Value: "operator"}, {Name: "B", Value: "profile"}, {Name: "C", Value: "profile"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &AccessProvider{Name: "p", ExecConfig: base, ProfileSourcedCLIArgsPolicy: c.args, ProfileSourcedEnvVarsPolicy: c.envs}
			e, err := p.execWith(exts, noEnviron)
			if err != nil {
				t.Fatal(err)
			}
			if e.Command != base.Command || e.InteractiveMode != clientcmdapi.NeverExecInteractiveMode {
				t.Errorf("command %q, interactive mode %q: want the operator's, Never", e.Command, e.InteractiveMode)
			}
			if !slices.Equal(e.Args, c.wantArgs) || !slices.Equal(e.Env, c.wantEnv) {
				t.Errorf("args %q env %v, want %q %v", e.Args, e.Env, c.wantArgs, c.wantEnv)
			}
			if u, ok := e.Config.(*runtime.Unknown); !ok || string(u.Raw) != string(exts[ClusterExecExtension]) {
				t.Errorf("plugin cluster config %#v, want the exec extension as it is", e.Config)
			}
			if len(base.Args) != 1 || len(base.Env) != 2 {
				t.Error("the operator's provider was changed")
			}
		})
	}

	p := &AccessProvider{Name: "p", ExecConfig: base, ProfileSourcedCLIArgsPolicy: AccessPolicyAppend}
	if _, err := p.execWith(map[string]json.RawMessage{ClusterProfileArgsExtension: json.RawMessage(`{"not":"a list"}`)}, noEnviron); err == nil {
		t.Error("an args extension that is no list was accepted")
	}
}

// The args extension as a profile can store it: an object {"args": [...]}
// (the CRDs declare extensions objects), or the bare list of the Cluster
// Inventory API's library; anything else, and too much, refuses the
// profile with an error that quotes no argument.
func TestProfileArgsShapes(t *testing.T) {
	p := &AccessProvider{Name: "p", ExecConfig: &clientcmdapi.ExecConfig{Command: "/bin/plugin", Args: []string{"--fixed"}},
		ProfileSourcedCLIArgsPolicy: AccessPolicyAppend}
	exec := func(raw string) ([]string, error) {
		e, err := p.execWith(map[string]json.RawMessage{ClusterProfileArgsExtension: json.RawMessage(raw)}, noEnviron)
		if err != nil {
			return nil, err
		}
		return e.Args, nil
	}
	for _, ok := range []string{`{"args":["--tenant","t1"]}`, ` { "args" : [ "--tenant", "t1" ] } `, `["--tenant","t1"]`, "\n[\"--tenant\",\"t1\"]"} {
		if args, err := exec(ok); err != nil || !slices.Equal(args, []string{"--fixed", "--tenant", "t1"}) {
			t.Errorf("%s: args %q, error %v; want the operator's, then the profile's", ok, args, err)
		}
	}
	if args, err := exec(`{"args":[]}`); err != nil || !slices.Equal(args, []string{"--fixed"}) {
		t.Errorf("an empty list: args %q, error %v", args, err)
	}

	many := make([]string, maxProfileArgs+1)
	for i := range many {
		many[i] = "--x"
	}
	type argsExt struct {
		Args []string `json:"args"`
	}
	marshal := func(v argsExt) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tooMany := marshal(argsExt{many})
	exact := marshal(argsExt{many[:maxProfileArgs]})
	if args, err := exec(string(exact)); err != nil || len(args) != 1+maxProfileArgs {
		t.Errorf("%d arguments: %d taken, error %v; want all", maxProfileArgs, len(args), err)
	}
	long := marshal(argsExt{[]string{"--ok", "--secret=" + strings.Repeat("s", maxProfileArgLen)}})
	for _, c := range []struct{ raw, says string }{
		{`{"args":["--ok",42]}`, "argument 1 is not a string"},
		{`{"args":["--ok",null]}`, "argument 1 is not a string"},
		{`{"args":[["--nested"]]}`, "argument 0 is not a string"},
		{`{"args":[{"--k":"v"}]}`, "argument 0 is not a string"},
		{`["--ok",true]`, "argument 1 is not a string"},
		{`{"args":"--tenant t1"}`, `"args" is not a list`},
		{`{"args":{"0":"--x"}}`, `"args" is not a list`},
		{`{"argv":["--x"]}`, `unknown field "argv"`},
		{`{"args":["--x"],"command":"/bin/sh"}`, `unknown field "command"`},
		{`{"` + strings.Repeat("k", 1000) + `":1}`, `unknown field "kkkk`},
		{`{}`, `has no "args"`},
		{`null`, "neither an object"},
		{`"--tenant"`, "neither an object"},
		{`42`, "neither an object"},
		{`{"args":`, "neither an object"},
		{string(tooMany), fmt.Sprintf("%d arguments, more than the %d", maxProfileArgs+1, maxProfileArgs)},
		{string(long), "argument 1 is longer than 4096 bytes"},
		{`{"args":["--ok","a\u0000b"]}`, "argument 1 holds a control character"},
	} {
		_, err := exec(c.raw)
		if err == nil || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), ClusterProfileArgsExtension) {
			t.Errorf("%.80s: error %v, want one naming the extension and saying %q", c.raw, err, c.says)
			continue
		}
		if len(err.Error()) > 400 || strings.Contains(err.Error(), "--secret") || strings.Contains(err.Error(), "a\\x00b") {
			t.Errorf("%.80s: the error quotes the profile's input: %.200s", c.raw, err)
		}
	}
	// Ignored whatever it holds when the provider does not allow it.
	q := &AccessProvider{Name: "p", ExecConfig: p.ExecConfig}
	if e, err := q.execWith(map[string]json.RawMessage{ClusterProfileArgsExtension: tooMany}, noEnviron); err != nil || !slices.Equal(e.Args, []string{"--fixed"}) {
		t.Errorf("policy Ignore: args %v, error %v", e, err)
	}
}

// What the operator set in code and a providers file cannot hold —
// client-go's PluginPolicy, the plugin's Config — is the plugin's for
// every profile: a DenyAll or Allowlist policy does not become AllowAll.
// A profile's exec extension replaces the Config; the operator's provider
// is never changed.
func TestAccessProviderKeepsPluginPolicy(t *testing.T) {
	for _, policy := range []clientcmdapi.PluginPolicy{
		{PolicyType: clientcmdapi.PluginPolicyDenyAll},
		{PolicyType: clientcmdapi.PluginPolicyAllowlist, Allowlist: []clientcmdapi.AllowlistEntry{{Command: "/bin/plugin"}}},
	} {
		base := &clientcmdapi.ExecConfig{
			Command: "/bin/plugin", APIVersion: "client.authentication.k8s.io/v1", PluginPolicy: policy,
			Config: &runtime.Unknown{Raw: []byte(`{"audience":"operator"}`), ContentType: runtime.ContentTypeJSON},
		}
		p := &AccessProvider{Name: "p", ExecConfig: base}
		if err := checkAccessProviders([]AccessProvider{*p}); err != nil {
			t.Fatalf("policy %s: %v", policy.PolicyType, err)
		}
		e, err := p.execWith(nil, noEnviron)
		if err != nil {
			t.Fatal(err)
		}
		if e.PluginPolicy.PolicyType != policy.PolicyType || !slices.Equal(e.PluginPolicy.Allowlist, policy.Allowlist) {
			t.Errorf("policy %s: the plugin's policy is %+v", policy.PolicyType, e.PluginPolicy)
		}
		if u, ok := e.Config.(*runtime.Unknown); !ok || string(u.Raw) != `{"audience":"operator"}` {
			t.Errorf("policy %s: the plugin's config is %#v, want the operator's", policy.PolicyType, e.Config)
		}
		if len(e.PluginPolicy.Allowlist) > 0 {
			e.PluginPolicy.Allowlist[0].Command = "/bin/sh"
			if base.PluginPolicy.Allowlist[0].Command != "/bin/plugin" {
				t.Error("the plugin's allowlist is the operator's own slice")
			}
		}
		e, err = p.execWith(map[string]json.RawMessage{ClusterExecExtension: json.RawMessage(`{"audience":"profile"}`)}, noEnviron)
		if err != nil {
			t.Fatal(err)
		}
		if u, ok := e.Config.(*runtime.Unknown); !ok || string(u.Raw) != `{"audience":"profile"}` || e.PluginPolicy.PolicyType != policy.PolicyType {
			t.Errorf("policy %s, with an exec extension: config %#v, policy %+v", policy.PolicyType, e.Config, e.PluginPolicy)
		}
	}
	bad := &clientcmdapi.ExecConfig{Command: "/bin/plugin", APIVersion: "client.authentication.k8s.io/v1",
		PluginPolicy: clientcmdapi.PluginPolicy{PolicyType: clientcmdapi.PluginPolicyDenyAll, Allowlist: []clientcmdapi.AllowlistEntry{{Command: "/bin/plugin"}}}}
	if err := checkAccessProviders([]AccessProvider{{Name: "p", ExecConfig: bad}}); err == nil || !strings.Contains(err.Error(), "plugin policy") {
		t.Errorf("a policy client-go refuses: error %v, want one at construction", err)
	}
}

// A profile that lists no provider the operator knows is an error quoting
// at most eight of the names it lists, each cut, and counting the rest:
// a profile may list thousands, megabytes long.
func TestClusterProfileUnknownProvidersBounded(t *testing.T) {
	operator := []AccessProvider{{Name: "known", ExecConfig: &clientcmdapi.ExecConfig{Command: "/bin/plugin"}}}
	cp := &clusterProfile{ref: "ns/many"}
	for i := range 1000 {
		cp.status.AccessProviders = append(cp.status.AccessProviders, profileAccess{Name: fmt.Sprintf("p%04d-%s", i, strings.Repeat("x", 10000))})
	}
	cp.status.CredentialProviders = cp.status.AccessProviders[:10] // the same names, counted once
	_, _, err := cp.access(operator)
	if !errors.Is(err, ErrClusterProfileNoAccessProvider) {
		t.Fatalf("error %v, want ErrClusterProfileNoAccessProvider", err)
	}
	msg := err.Error()
	if len(msg) > 1000 || !strings.Contains(msg, `"p0000-xxx`) || !strings.Contains(msg, `"p0007-xxx`) || strings.Contains(msg, "p0008") ||
		!strings.Contains(msg, "and 992 more") || !strings.Contains(msg, `["known"]`) {
		t.Errorf("error (%d bytes) %.600s; want the first 8 names cut, 992 more counted, and the operator's", len(msg), msg)
	}

	cp.status.AccessProviders, cp.status.CredentialProviders = []profileAccess{{Name: "b"}, {Name: "a"}}, nil
	if _, _, err := cp.access(operator); err == nil || !strings.Contains(err.Error(), `it lists "a", "b"; the operator's are ["known"]`) {
		t.Errorf("two names: error %v", err)
	}
}

// Status properties are cut at 128, but the well-known ones mccr names
// are taken first: 200 properties sorting before them do not push out
// the cluster's ID or its ClusterSet.
func TestClusterProfilePropertiesKeepWellKnown(t *testing.T) {
	cp := &clusterProfile{ref: "ns/p", ident: ClusterProfileIdentity{Properties: map[string]string{
		ClusterIDProperty: "id-1", ClusterSetProperty: "set-a",
	}}}
	for i := range 200 {
		cp.ident.Properties[fmt.Sprintf("a%03d", i)] = "v"
	}
	p := cp.properties()
	if p[ClusterIDProperty] != "id-1" || p[ClusterSetProperty] != "set-a" || p[ClusterProfileProperty] != "ns/p" {
		t.Errorf("id %q, set %q, profile %q; want id-1, set-a, ns/p", p[ClusterIDProperty], p[ClusterSetProperty], p[ClusterProfileProperty])
	}
	if len(p) != maxMetaProperties+1 || p["a125"] != "v" || p["a126"] != "" {
		t.Errorf("%d properties (a125 %q, a126 %q); want the two well-known, a000 to a125, and the profile's name", len(p), p["a125"], p["a126"])
	}
	// A well-known property whose value is too long is left out like any other.
	cp.ident.Properties[ClusterIDProperty] = strings.Repeat("x", maxPropertyValue+1)
	if p := cp.properties(); p[ClusterIDProperty] != "" || p["a126"] != "v" || len(p) != maxMetaProperties+1 {
		t.Errorf("a too long ID: %d properties, id kept %v", len(p), p[ClusterIDProperty] != "")
	}
}
