package configwatcher

import (
	"encoding/json"
	"slices"
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
