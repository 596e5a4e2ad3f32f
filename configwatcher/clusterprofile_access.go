package configwatcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"
)

// ErrAccessProvidersInvalid means the operator's access providers (the
// providers file, or WithAccessProviders) cannot be used: the file does not
// read or parse, a provider has no name or no command, two share a name, a
// policy is unknown. NewClusterProfileWatcher returns it, naming the file.
var ErrAccessProvidersInvalid = errors.New("invalid access providers")

// AccessPolicy says whether a ClusterProfile may add to an access
// provider's exec plugin, through the extensions of KEP-5339 (see
// AccessProvider).
type AccessPolicy string

// The values of AccessProvider.ProfileSourcedCLIArgsPolicy (Ignore,
// Append) and ProfileSourcedEnvVarsPolicy (Ignore, AppendIfNotExists,
// Replace). The empty policy is Ignore.
const (
	// AccessPolicyIgnore ignores what the profile adds. The default.
	AccessPolicyIgnore AccessPolicy = "Ignore"
	// AccessPolicyAppend appends the profile's arguments to the
	// provider's.
	AccessPolicyAppend AccessPolicy = "Append"
	// AccessPolicyAppendIfNotExists adds the profile's environment
	// variables that the provider does not set itself.
	AccessPolicyAppendIfNotExists AccessPolicy = "AppendIfNotExists"
	// AccessPolicyReplace adds the profile's environment variables, which
	// win over the provider's of the same name.
	AccessPolicyReplace AccessPolicy = "Replace"
)

// Extension names in a ClusterProfile access provider's cluster.
const (
	// ClusterExecExtension is client-go's reserved extension name for the
	// per-cluster config of an exec plugin: its content reaches the plugin
	// as spec.cluster.config in KUBERNETES_EXEC_INFO.
	ClusterExecExtension = "client.authentication.k8s.io/exec"
	// ClusterProfileArgsExtension holds a list of arguments the profile
	// asks to add to the plugin's command line (KEP-5339).
	ClusterProfileArgsExtension = "clusterprofiles.multicluster.x-k8s.io/exec/additional-args"
	// ClusterProfileEnvExtension holds a map of environment variables the
	// profile asks to give the plugin (KEP-5339).
	ClusterProfileEnvExtension = "clusterprofiles.multicluster.x-k8s.io/exec/additional-envs"
)

// AccessProvider is one entry of the access-providers file of the Cluster
// Inventory API (sigs.k8s.io/cluster-inventory-api/pkg/access, KEP-5339):
// a name that ClusterProfiles list in status.accessProviders, and the exec
// credential plugin that gets credentials for the clusters they describe.
//
// The file is JSON (YAML works too), read strictly: a misspelt field is an
// error rather than a setting silently lost:
//
//	{
//	  "providers": [
//	    {
//	      "name": "secretreader",
//	      "execConfig": {
//	        "apiVersion": "client.authentication.k8s.io/v1",
//	        "command": "/usr/local/bin/secretreader-plugin",
//	        "args": ["--namespace", "fleet-credentials"],
//	        "env": [{"name": "LOG_LEVEL", "value": "info"}],
//	        "provideClusterInfo": true
//	      },
//	      "profileSourcedCLIArgsPolicy": "Ignore",
//	      "profileSourcedEnvVarsPolicy": "Ignore"
//	    }
//	  ]
//	}
//
// execConfig is a kubeconfig user's exec entry (clientcmd's ExecConfig). Its
// interactiveMode is always Never: there is nobody to answer a prompt.
// With provideClusterInfo, the plugin receives in KUBERNETES_EXEC_INFO the
// cluster it is asked about (server, CA, TLS server name, proxy) and, as
// spec.cluster.config, the profile's ClusterExecExtension.
//
// The two policies (Ignore unless set) let a profile add arguments
// (ClusterProfileArgsExtension) and environment variables
// (ClusterProfileEnvExtension) to the plugin's. Set them only for a plugin
// that treats them as untrusted input: whoever writes the profile's status
// chooses them.
type AccessProvider struct {
	Name                        string                   `json:"name"`
	ExecConfig                  *clientcmdapi.ExecConfig `json:"execConfig"`
	ProfileSourcedCLIArgsPolicy AccessPolicy             `json:"profileSourcedCLIArgsPolicy,omitempty"`
	ProfileSourcedEnvVarsPolicy AccessPolicy             `json:"profileSourcedEnvVarsPolicy,omitempty"`
}

// accessProvidersFile is the document a providers file holds.
type accessProvidersFile struct {
	Providers []AccessProvider `json:"providers"`
}

// accessProvidersFileLimit bounds the size of a providers file read.
const accessProvidersFileLimit = 1 << 20

// LoadAccessProviders reads an access-providers file (see AccessProvider).
// Errors wrap ErrAccessProvidersInvalid and name the file; they never quote
// its content, which may hold credentials in a plugin's environment.
func LoadAccessProviders(path string) ([]AccessProvider, error) {
	fail := func(format string, args ...any) ([]AccessProvider, error) {
		return nil, fmt.Errorf("configwatcher: access providers file %s: %w: %s", path, ErrAccessProvidersInvalid, fmt.Sprintf(format, args...))
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return fail("%v", errors.Unwrap(err))
	case !fi.Mode().IsRegular():
		return fail("not a regular file")
	case fi.Size() > accessProvidersFileLimit:
		return fail("larger than %d bytes", accessProvidersFileLimit)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return fail("%v", errors.Unwrap(err))
	}
	var f accessProvidersFile
	if err := yaml.UnmarshalStrict(raw, &f); err != nil {
		// Decoders quote at most a character of the input.
		return fail("does not parse: %v", err)
	}
	if len(f.Providers) == 0 {
		return fail(`no "providers"`)
	}
	if err := checkAccessProviders(f.Providers); err != nil {
		return fail("%v", err)
	}
	return f.Providers, nil
}

// checkAccessProviders finds what would only fail once a plugin runs.
func checkAccessProviders(ps []AccessProvider) error {
	seen := map[string]bool{}
	for i, p := range ps {
		what := fmt.Sprintf("provider %d (%q)", i, p.Name)
		switch {
		case strings.TrimSpace(p.Name) == "":
			return fmt.Errorf("provider %d has no name", i)
		case seen[p.Name]:
			return fmt.Errorf("%s: the name is used twice", what)
		case p.ExecConfig == nil:
			return fmt.Errorf("%s has no execConfig", what)
		case strings.TrimSpace(p.ExecConfig.Command) == "":
			return fmt.Errorf("%s: execConfig has no command", what)
		}
		seen[p.Name] = true
		switch p.ExecConfig.APIVersion {
		case "client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1":
		default:
			return fmt.Errorf("%s: execConfig.apiVersion %q is neither client.authentication.k8s.io/v1 nor v1beta1", what, p.ExecConfig.APIVersion)
		}
		switch p.ProfileSourcedCLIArgsPolicy {
		case "", AccessPolicyIgnore, AccessPolicyAppend:
		default:
			return fmt.Errorf("%s: unknown profileSourcedCLIArgsPolicy %q", what, p.ProfileSourcedCLIArgsPolicy)
		}
		switch p.ProfileSourcedEnvVarsPolicy {
		case "", AccessPolicyIgnore, AccessPolicyAppendIfNotExists, AccessPolicyReplace:
		default:
			return fmt.Errorf("%s: unknown profileSourcedEnvVarsPolicy %q", what, p.ProfileSourcedEnvVarsPolicy)
		}
	}
	return nil
}

// execFor is the exec plugin provider p runs for a profile's cluster:
// the operator's command, arguments and environment, with what the
// profile's extensions add as far as p's policies let them, and the
// profile's ClusterExecExtension as the plugin's cluster config. exts are
// the profile's cluster extensions, by name.
func (p *AccessProvider) execFor(exts map[string]json.RawMessage) (*clientcmdapi.ExecConfig, error) {
	src := p.ExecConfig
	e := &clientcmdapi.ExecConfig{
		Command:            src.Command,
		Args:               slices.Clone(src.Args),
		Env:                slices.Clone(src.Env),
		APIVersion:         src.APIVersion,
		InstallHint:        src.InstallHint,
		ProvideClusterInfo: src.ProvideClusterInfo,
		InteractiveMode:    clientcmdapi.NeverExecInteractiveMode,
	}
	if raw, ok := exts[ClusterProfileArgsExtension]; ok && p.ProfileSourcedCLIArgsPolicy == AccessPolicyAppend {
		var args []string
		if err := json.Unmarshal(raw, &args); err != nil {
			return nil, fmt.Errorf("extension %s is not a list of strings", ClusterProfileArgsExtension)
		}
		e.Args = append(e.Args, args...)
	}
	if raw, ok := exts[ClusterProfileEnvExtension]; ok {
		switch p.ProfileSourcedEnvVarsPolicy {
		case AccessPolicyAppendIfNotExists, AccessPolicyReplace:
			var env map[string]string
			if err := json.Unmarshal(raw, &env); err != nil {
				return nil, fmt.Errorf("extension %s is not a map of strings", ClusterProfileEnvExtension)
			}
			e.Env = mergeExecEnv(e.Env, env, p.ProfileSourcedEnvVarsPolicy == AccessPolicyReplace)
		default:
		}
	}
	if raw, ok := exts[ClusterExecExtension]; ok {
		e.Config = &runtime.Unknown{Raw: slices.Clone(raw), ContentType: runtime.ContentTypeJSON}
	}
	return e, nil
}

// mergeExecEnv adds env to base, replacing base's variables of the same
// name if replace. The result is sorted by name, so that the same inputs
// give the same Fingerprint.
func mergeExecEnv(base []clientcmdapi.ExecEnvVar, env map[string]string, replace bool) []clientcmdapi.ExecEnvVar {
	merged := map[string]string{}
	for _, v := range base {
		merged[v.Name] = v.Value
	}
	for k, v := range env {
		if _, ok := merged[k]; !ok || replace {
			merged[k] = v
		}
	}
	out := make([]clientcmdapi.ExecEnvVar, 0, len(merged))
	for k, v := range merged {
		out = append(out, clientcmdapi.ExecEnvVar{Name: k, Value: v})
	}
	slices.SortFunc(out, func(a, b clientcmdapi.ExecEnvVar) int { return strings.Compare(a.Name, b.Name) })
	return out
}
