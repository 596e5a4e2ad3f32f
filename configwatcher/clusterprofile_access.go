package configwatcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	authexec "k8s.io/client-go/plugin/pkg/client/auth/exec"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/mccr-dev/mccr/config"
)

// ErrAccessProvidersInvalid means the operator's access providers (the
// providers file, or WithAccessProviders) cannot be used: the file does not
// read or parse, a provider has no name or no command, two share a name, a
// policy is unknown, an execConfig's PluginPolicy is one client-go refuses. NewClusterProfileWatcher returns it, naming the file.
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
	// variables that neither the provider's env nor the controller's own
	// environment (which the plugin inherits) sets.
	AccessPolicyAppendIfNotExists AccessPolicy = "AppendIfNotExists"
	// AccessPolicyReplace adds the profile's environment variables, which
	// win over the provider's env of the same name, but not over a
	// variable only the controller's own environment sets, unless the
	// provider's AllowedProfileEnvVars names it.
	AccessPolicyReplace AccessPolicy = "Replace"
)

// Extension names in a ClusterProfile access provider's cluster.
const (
	// ClusterExecExtension is client-go's reserved extension name for the
	// per-cluster config of an exec plugin: its content reaches the plugin
	// as spec.cluster.config in KUBERNETES_EXEC_INFO.
	ClusterExecExtension = "client.authentication.k8s.io/exec"
	// ClusterProfileArgsExtension holds the arguments the profile asks to
	// add to the plugin's command line (KEP-5339): an object whose "args"
	// is a list of strings, {"args": ["--tenant", "t1"]}, or the list
	// alone. The list is the shape the Cluster Inventory API's own library
	// reads, but the extension is an object in the upstream CRDs (and in
	// those of package clusterinventory), so the API server stores no
	// list there: a cluster manager writes the object.
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
// Fields that a file does not hold but WithAccessProviders may set are
// kept: PluginPolicy (client-go then refuses to run a command it does not
// allow) and Config, the plugin's cluster config for a profile without a
// ClusterExecExtension.
// With provideClusterInfo, the plugin receives in KUBERNETES_EXEC_INFO the
// cluster it is asked about (server, CA, TLS server name, proxy) and, as
// spec.cluster.config, the profile's ClusterExecExtension.
//
// The two policies (Ignore unless set) let a profile add arguments
// (ClusterProfileArgsExtension) and environment variables
// (ClusterProfileEnvExtension) to the plugin's. Whoever writes the
// profile's status chooses them, and the plugin runs with the controller's
// identity: its ServiceAccount token, its cloud workload identity, its
// files. Set a policy only for a plugin that treats what it allows as
// untrusted input.
//
// Environment. client-go starts the plugin with the controller's whole
// environment followed by the provider's env, so a variable in the env
// wins over one inherited. A profile's variables are therefore checked,
// under both AppendIfNotExists and Replace, and the whole profile is
// refused (an error naming it and each variable, never a value; its
// cluster keeps its last good config, if it had one) when it gives a name
// that is no valid variable name (as for a Pod: letters, digits, '_', '-',
// '.'), a value holding NUL, one name twice in two cases, or a name that
// steers the programs the plugin is made of rather than the plugin's own
// work:
//
//   - the dynamic loader and C library: LD_*, DYLD_*, MALLOC_*,
//     GLIBC_TUNABLES, GCONV_PATH, LOCPATH, NLSPATH, HOSTALIASES,
//     RES_OPTIONS, LOCALDOMAIN, TMPDIR, TZ, and the rest of glibc's list
//     of variables unsafe for set-user-ID programs;
//   - shells: BASH_* (BASH_ENV, exported functions), ENV, SHELLOPTS,
//     BASHOPTS, PS4, PROMPT_COMMAND, IFS, CDPATH, GLOBIGNORE, FPATH,
//     ZDOTDIR, SHELL, PSModulePath;
//   - where programs and their files are found: PATH, HOME, XDG_*, TMP,
//     TEMP, ZONEINFO and the Windows equivalents (PATHEXT, COMSPEC,
//     USERPROFILE, APPDATA, ...);
//   - programs that programs run: PAGER, EDITOR, VISUAL, BROWSER, GIT_*,
//     SSH_*;
//   - language runtimes: GO* (GODEBUG, GOFLAGS, GOTOOLCHAIN, ...), NODE_*,
//     PYTHON*, PERL*, RUBY*, JAVA_*, _JAVA_*, JDK_*, CLASSPATH, DOTNET_*,
//     CORECLR_*, LUA_*, PHP*, and the like;
//   - TLS trust and routing: SSL* (SSL_CERT_FILE, SSLKEYLOGFILE),
//     OPENSSL*, CURL*, REQUESTS_CA_BUNDLE, NIX_SSL_CERT_FILE, GRPC_*,
//     SOCKS* (SOCKS_SERVER), OTEL_* (OTEL_EXPORTER_OTLP_ENDPOINT,
//     OTEL_EXPORTER_OTLP_HEADERS), and every *_PROXY;
//   - credentials and endpoints: AWS_*, AZURE_*, AAD_*, GOOGLE_*,
//     CLOUDSDK_*, GCE_*, MSI_*, IDENTITY_ENDPOINT, SCW_*, VAULT_*, KRB5*,
//     DOCKER_*, KUBE* (KUBECONFIG, KUBERNETES_SERVICE_HOST, ...).
//
// Names are compared upper-cased. The refusal is an error on the
// watcher's Errors wrapping ErrClusterProfileInvalid. AllowedProfileEnvVars
// lifts the list above for exact names the operator has checked with the
// plugin (AWS_REGION, say); nothing lifts the other refusals.
//
// Of the variables that pass, AppendIfNotExists adds those that neither
// the env nor the controller's environment sets. Replace adds them all,
// replacing the env's of the same name; one that only the controller's
// environment sets stays the controller's unless AllowedProfileEnvVars
// names it, because that environment is the operator's deployment, which
// the providers file does not show. The controller's environment is read
// whenever the watcher builds the config; a variable the controller adds
// to its own environment later is not seen.
//
// Arguments. Append gives the profile the plugin's command line after the
// operator's arguments: every flag the plugin has, and for a wrapper
// script whatever it does with "$@" (sh -c "$*" runs them; a flag such as
// --exec or --config chooses another program or file). The extension is
// {"args": [...]}, a list of strings (see ClusterProfileArgsExtension);
// the profile is refused when it holds anything else (another field, an
// argument that is no string), more than 64 arguments, an argument longer
// than 4096 bytes, or one holding a control character (NUL, a line break,
// an escape); the error names the argument by its position, never quotes
// it.
// Keep Ignore unless every flag of the plugin is safe in a stranger's
// hands.
type AccessProvider struct {
	Name                        string                   `json:"name"`
	ExecConfig                  *clientcmdapi.ExecConfig `json:"execConfig"`
	ProfileSourcedCLIArgsPolicy AccessPolicy             `json:"profileSourcedCLIArgsPolicy,omitempty"`
	ProfileSourcedEnvVarsPolicy AccessPolicy             `json:"profileSourcedEnvVarsPolicy,omitempty"`

	// AllowedProfileEnvVars are variables a profile may set although
	// the refused list above holds them, and, with Replace, although the
	// controller's environment sets them: exact names, compared
	// upper-cased ("allowedProfileEnvVars" in the file). Not part of
	// KEP-5339. It needs an env policy other than Ignore.
	AllowedProfileEnvVars []string `json:"allowedProfileEnvVars,omitempty"`
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
		// Decoders quote what they choke on (an unknown anchor's name, an
		// undecodable scalar): the file holds the plugins' environment.
		return fail("does not parse: %s", config.DecodeErrorMessage(err, raw))
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
		if err := authexec.ValidatePluginPolicy(p.ExecConfig.PluginPolicy); err != nil {
			return fmt.Errorf("%s: execConfig plugin policy: %w", what, err)
		}
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
		if len(p.AllowedProfileEnvVars) > 0 && !p.profileEnv() {
			return fmt.Errorf("%s: allowedProfileEnvVars needs a profileSourcedEnvVarsPolicy that lets profiles set variables", what)
		}
		for _, name := range p.AllowedProfileEnvVars {
			if !validEnvName(name) {
				return fmt.Errorf("%s: allowedProfileEnvVars: %s is not a variable name (exact names only)", what, quoteName(name))
			}
		}
	}
	return nil
}

// profileEnv tells whether p lets profiles add environment variables.
func (p *AccessProvider) profileEnv() bool {
	return p.ProfileSourcedEnvVarsPolicy == AccessPolicyAppendIfNotExists || p.ProfileSourcedEnvVarsPolicy == AccessPolicyReplace
}

// execFor is the exec plugin provider p runs for a profile's cluster:
// the operator's ExecConfig (its PluginPolicy and Config included), with
// what the profile's extensions add as far as p's policies and the rules
// of AccessProvider let them, and the profile's ClusterExecExtension, when
// it has one, as the plugin's cluster config in place of the operator's. exts are the profile's cluster extensions, by
// name. What the plugin inherits is the controller's environment.
func (p *AccessProvider) execFor(exts map[string]json.RawMessage) (*clientcmdapi.ExecConfig, error) {
	return p.execWith(exts, os.Environ)
}

// execWith is execFor, with environ standing for the controller's
// environment.
func (p *AccessProvider) execWith(exts map[string]json.RawMessage, environ func() []string) (*clientcmdapi.ExecConfig, error) {
	// A deep copy keeps every field the operator set, PluginPolicy and
	// Config among them, and fields client-go adds later.
	e := p.ExecConfig.DeepCopy()
	e.InteractiveMode = clientcmdapi.NeverExecInteractiveMode
	if raw, ok := exts[ClusterProfileArgsExtension]; ok && p.ProfileSourcedCLIArgsPolicy == AccessPolicyAppend {
		args, err := profileArgs(raw)
		if err != nil {
			return nil, err
		}
		e.Args = append(e.Args, args...)
	}
	if raw, ok := exts[ClusterProfileEnvExtension]; ok && p.profileEnv() {
		var env map[string]string
		if err := json.Unmarshal(raw, &env); err != nil {
			return nil, fmt.Errorf("extension %s is not a map of strings", ClusterProfileEnvExtension)
		}
		m := profileEnvMerge{policy: p.ProfileSourcedEnvVarsPolicy, allowed: make(map[string]bool, len(p.AllowedProfileEnvVars)), environ: environ}
		for _, name := range p.AllowedProfileEnvVars {
			m.allowed[strings.ToUpper(name)] = true
		}
		var err error
		if e.Env, err = m.merge(e.Env, env); err != nil {
			return nil, err
		}
	}
	if raw, ok := exts[ClusterExecExtension]; ok {
		e.Config = &runtime.Unknown{Raw: slices.Clone(raw), ContentType: runtime.ContentTypeJSON}
	}
	return e, nil
}
