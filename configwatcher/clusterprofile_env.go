package configwatcher

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// This file holds the rules for what a ClusterProfile may add to the
// environment and the command line of an operator's exec plugin
// (ClusterProfileEnvExtension, ClusterProfileArgsExtension).
//
// client-go starts a plugin with the controller's whole environment, then
// the ExecConfig's env, then KUBERNETES_EXEC_INFO; for a name given twice
// the last value wins (os/exec keeps the last, comparing names without
// regard to case on Windows). So a variable in the ExecConfig's env
// overrides one the controller inherited, and the profile's variables,
// merged into that env, reach every program the plugin starts: the loader,
// the shell of a wrapper script, the interpreter of a cloud CLI, and the
// SDK that finds the credentials. The plugin runs with the controller's
// identity (its ServiceAccount token, cloud workload identity, files), and
// whoever writes a profile's status is not the operator.

// profileEnvDeniedGroups are the variables a profile may not set, by why:
// exact names and name prefixes, compared upper-cased. The rule behind
// them: refused is every variable that makes a program load or run code
// it was not asked to, read its start-up files or configuration from
// somewhere else, trust other certificates, send its traffic elsewhere, or
// pick other credentials or another identity. The list starts from
// glibc's own (the variables it drops for set-user-ID programs, which face
// the same threat: a caller choosing the environment of a program that
// holds privileges) and adds the shells, interpreters, TLS and proxy
// settings, and the credential variables of the cloud SDKs whose CLIs
// usually serve as access providers. Names ending in _PROXY are refused
// too (profileEnvProxyWhy).
//
// It cannot know the private variables of every plugin: an operator whose
// plugin reads its endpoint or identity from other variables keeps that
// provider's env policy at Ignore, or sets those variables in the
// provider's env and uses AppendIfNotExists.
var profileEnvDeniedGroups = []struct {
	why      string
	names    []string
	prefixes []string
}{{
	// TZ=:path makes the C library read that file as the time zone.
	why: "read by the dynamic loader or the C library (libraries loaded, files read, name resolution)",
	names: []string{"GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LIBPATH", "LOCALDOMAIN",
		"LOCPATH", "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TMPDIR", "TZ", "TZDIR"},
	prefixes: []string{"LD_", "DYLD_", "MALLOC_", "MUSL_", "GNUTLS_"},
}, {
	// bash expands BASH_ENV, PS4 and PROMPT_COMMAND, command
	// substitutions included; BASH_FUNC_name%% defines functions (and is
	// no valid name anyway); SHELLOPTS=xtrace makes bash expand PS4
	// before every command; dash reads IFS; zsh reads $ZDOTDIR/.zshenv
	// even for scripts; PowerShell loads modules from PSModulePath.
	why: "a shell's start-up file, option or prompt",
	names: []string{"BASHOPTS", "CDPATH", "ENV", "FPATH", "GLOBIGNORE", "IFS", "PROMPT_COMMAND", "PS4",
		"SHELL", "SHELLOPTS", "ZDOTDIR", "PSMODULEPATH"},
	prefixes: []string{"BASH_"},
}, {
	// ZONEINFO is the time zone database Go programs read.
	why: "where programs, their configuration and their files are found",
	names: []string{"PATH", "PATHEXT", "COMSPEC", "HOME", "USERPROFILE", "APPDATA", "LOCALAPPDATA", "PROGRAMDATA",
		"HOMEDRIVE", "HOMEPATH", "SYSTEMROOT", "WINDIR", "TMP", "TEMP", "ZONEINFO"},
	prefixes: []string{"XDG_"},
}, {
	why:      "a program that other programs run (pager, editor, browser, password prompt, git and ssh commands)",
	names:    []string{"PAGER", "EDITOR", "VISUAL", "BROWSER"},
	prefixes: []string{"GIT_", "SSH_"},
}, {
	// Most plugins are Go programs: GODEBUG=http2debug=2 alone prints
	// request headers, credentials included, to the plugin's stderr,
	// which is the controller's.
	why:   "read by a language runtime or interpreter at start-up (code or modules loaded, options)",
	names: []string{"CLASSPATH", "TCLLIBPATH"},
	prefixes: []string{"NODE_", "NPM_CONFIG_", "PYTHON", "PERL", "RUBY", "GEM_", "BUNDLE_", "JAVA_", "_JAVA_", "JDK_",
		"DOTNET_", "CORECLR_", "COMPLUS_", "LUA_", "PHP", "GO"},
}, {
	// NIX_SSL_CERT_FILE is the CA bundle of Nix-built programs; SOCKS
	// covers SOCKS_SERVER and SOCKS5_SERVER, read by SOCKS clients;
	// OTEL_ is OpenTelemetry's, whose exporters send spans (and the
	// headers OTEL_EXPORTER_OTLP_HEADERS adds) where
	// OTEL_EXPORTER_OTLP_ENDPOINT says, trusting OTEL_*_CERTIFICATE.
	why:      "TLS trust, TLS key logging or where traffic is sent",
	names:    []string{"REQUESTS_CA_BUNDLE", "WGETRC", "NETRC", "NIX_SSL_CERT_FILE"},
	prefixes: []string{"SSL", "OPENSSL", "CURL", "GRPC_", "SOCKS", "OTEL_"},
}, {
	// KUBERNETES_SERVICE_HOST would send an in-cluster client's
	// ServiceAccount token, the controller's, elsewhere.
	why: "credentials, identity or endpoints of a cloud SDK or a Kubernetes client",
	// OS_ is OpenStack's (client-keystone-auth: OS_AUTH_URL would send
	// an inherited OS_PASSWORD elsewhere); DIGITALOCEAN_ doctl's,
	// TELEPORT_ tsh's, ADAL_ the old Azure library's, HTTPLIB2_CA_CERTS
	// gcloud's CA bundle, SCW_ Scaleway's (SCW_SECRET_KEY, SCW_API_URL,
	// SCW_PROFILE, ...).
	names: []string{"IDENTITY_ENDPOINT", "IDENTITY_HEADER", "IMDS_ENDPOINT", "HTTPLIB2_CA_CERTS"},
	prefixes: []string{"AWS_", "AZURE_", "AAD_", "ADAL_", "MSI_", "GOOGLE_", "CLOUDSDK_", "GCE_", "ALIBABA_CLOUD_", "OCI_",
		"IBMCLOUD_", "OS_", "DIGITALOCEAN_", "SCW_", "TELEPORT_", "VAULT_", "KRB5", "DOCKER_", "KUBE"},
}}

// profileEnvDeniedNames and profileEnvDeniedPrefixes index
// profileEnvDeniedGroups: why, by name or prefix.
var profileEnvDeniedNames, profileEnvDeniedPrefixes = func() (names, prefixes map[string]string) {
	names, prefixes = map[string]string{}, map[string]string{}
	for _, g := range profileEnvDeniedGroups {
		for _, n := range g.names {
			names[n] = g.why
		}
		for _, p := range g.prefixes {
			prefixes[p] = g.why
		}
	}
	return names, prefixes
}()

// profileEnvProxyWhy is why a name ending in _PROXY is refused: HTTP_PROXY,
// HTTPS_PROXY, ALL_PROXY, NO_PROXY and their lower-case forms, which Go,
// curl and Python all read, would send the plugin's requests for
// credentials through the profile writer's proxy.
const profileEnvProxyWhy = "a proxy setting: where traffic is sent"

// profileEnvDenied says why a profile may not set the variable name (a
// valid name), or "" if it may. Names are compared upper-cased: Windows
// does not tell HOME from home, and several programs read both forms
// (http_proxy, say).
func profileEnvDenied(name string) string {
	up := strings.ToUpper(name)
	if why, ok := profileEnvDeniedNames[up]; ok {
		return why
	}
	why, longest := "", 0
	for p, w := range profileEnvDeniedPrefixes {
		if len(p) > longest && strings.HasPrefix(up, p) {
			why, longest = w, len(p)
		}
	}
	if why == "" && strings.HasSuffix(up, "_PROXY") {
		why = profileEnvProxyWhy
	}
	return why
}

// validEnvName is the rule for a variable a profile names, and for the
// operator's AllowedProfileEnvVars: a Pod's env var name (letters,
// digits, '_', '-', '.', not starting with a digit). It leaves out '=',
// NUL, blanks, control characters and everything a shell treats
// specially.
func validEnvName(name string) bool {
	return len(validation.IsEnvVarName(name)) == 0
}

// profileEnvMerge is what a profile's variables become under a provider's
// policy.
type profileEnvMerge struct {
	// policy is AccessPolicyAppendIfNotExists or AccessPolicyReplace.
	policy AccessPolicy
	// allowed are the operator's AllowedProfileEnvVars, upper-cased.
	allowed map[string]bool
	// environ returns the controller's environment, which the plugin
	// inherits (os.Environ).
	environ func() []string
}

// merge adds the profile's variables env to the provider's base, as the
// policy says, and returns the plugin's env sorted by name (the same
// inputs give the same Fingerprint). Names are compared without regard to
// case throughout, as Windows does, so that a providers file means the
// same everywhere.
//
// Refused, under either policy: a name that is no valid variable name, a
// value holding NUL, one name given twice (in two cases), and a name
// profileEnvDenied refuses unless the operator allowed it. The error names
// every refused variable, never a value.
//
// Of the others, AppendIfNotExists adds those that neither base nor the
// controller's environment holds. Replace adds them all, each replacing
// base's variable of its name (under base's spelling of it), except those
// that only the controller's environment holds, which the profile
// overrides (under the environment's spelling) only if the operator
// allowed the name: the controller's environment is the operator's
// deployment, which the providers file does not show, so opening the
// provider's env to profiles does not open it.
func (m *profileEnvMerge) merge(base []clientcmdapi.ExecEnvVar, env map[string]string) ([]clientcmdapi.ExecEnvVar, error) {
	var refused []string
	seen := make(map[string]string, len(env))
	for _, name := range slices.Sorted(maps.Keys(env)) {
		up := strings.ToUpper(name)
		switch {
		case !validEnvName(name):
			refused = append(refused, fmt.Sprintf("%s (not a valid variable name)", quoteName(name)))
			continue
		case seen[up] != "":
			refused = append(refused, fmt.Sprintf("%s (given twice, as %q and %q)", quoteName(name), seen[up], name))
			continue
		case strings.ContainsRune(env[name], 0):
			refused = append(refused, fmt.Sprintf("%s (its value holds a NUL byte)", quoteName(name)))
		case !m.allowed[up]:
			if why := profileEnvDenied(name); why != "" {
				refused = append(refused, fmt.Sprintf("%s (%s)", quoteName(name), why))
			}
		}
		seen[up] = name
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("extension %s: refused %s; an operator allows a name with the provider's allowedProfileEnvVars",
			ClusterProfileEnvExtension, strings.Join(refused, ", "))
	}

	// inherited maps the controller's variables, upper-cased, to their
	// names as spelled.
	inherited := map[string]string{}
	for _, kv := range m.environ() {
		if name, _, _ := strings.Cut(kv, "="); name != "" {
			inherited[strings.ToUpper(name)] = name
		}
	}
	merged := make(map[string]clientcmdapi.ExecEnvVar, len(base)+len(env))
	for _, v := range base {
		merged[strings.ToUpper(v.Name)] = v
	}
	for up, name := range seen {
		// A variable the profile replaces keeps the name it replaces,
		// as spelled there: where names are told apart by case (Linux,
		// macOS), the profile's spelling would be another variable, and
		// dropping the provider's would let the controller's own value
		// of that name through — one the operator overrode, and the
		// profile may not set.
		add, spelled := true, name
		if v, inBase := merged[up]; inBase {
			add, spelled = m.policy == AccessPolicyReplace, v.Name
		} else if own, ok := inherited[up]; ok {
			add, spelled = m.policy == AccessPolicyReplace && m.allowed[up], own
		}
		if add {
			merged[up] = clientcmdapi.ExecEnvVar{Name: spelled, Value: env[name]}
		}
	}
	out := make([]clientcmdapi.ExecEnvVar, 0, len(merged))
	for _, v := range merged {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b clientcmdapi.ExecEnvVar) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Bounds of what a profile's ClusterProfileArgsExtension may add: no
// plugin needs more, and every argument is copied into each config built
// and each run of the plugin.
const (
	maxProfileArgs   = 64
	maxProfileArgLen = 4096
)

// profileArgs reads a profile's ClusterProfileArgsExtension: an object
// {"args": [...]} (the shape the CRDs' extension schema, an object,
// stores) or a bare list (the Cluster Inventory API library's shape), of
// strings either way, bounded by maxProfileArgs and maxProfileArgLen and
// checked by checkProfileArgs. Errors say what is wrong and where, never
// quote an argument.
func profileArgs(raw json.RawMessage) ([]string, error) {
	fail := func(format string, args ...any) ([]string, error) {
		return nil, fmt.Errorf("extension %s: %s", ClusterProfileArgsExtension, fmt.Sprintf(format, args...))
	}
	list := raw
	if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) == 0 || t[0] != '[' {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
			return fail(`is neither an object {"args": [...]} nor a list of strings`)
		}
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			if k != "args" {
				return fail(`unknown field %s: the object holds "args" only`, quoteName(k))
			}
		}
		var ok bool
		if list, ok = obj["args"]; !ok {
			return fail(`the object has no "args"`)
		}
	}
	var items []json.RawMessage
	if err := json.Unmarshal(list, &items); err != nil {
		return fail(`"args" is not a list`)
	}
	if len(items) > maxProfileArgs {
		return fail("%d arguments, more than the %d a profile may add", len(items), maxProfileArgs)
	}
	args := make([]string, len(items))
	for i, item := range items {
		if err := json.Unmarshal(item, &args[i]); err != nil || string(bytes.TrimSpace(item)) == "null" {
			return fail("argument %d is not a string", i)
		}
		if len(args[i]) > maxProfileArgLen {
			return fail("argument %d is longer than %d bytes", i, maxProfileArgLen)
		}
	}
	if err := checkProfileArgs(args); err != nil {
		return nil, err
	}
	return args, nil
}

// checkProfileArgs refuses arguments that hold a control character (NUL,
// a line break, an escape): no flag of a credential plugin needs one, and
// they are how a value breaks out of the line or the word a wrapper script
// puts it in (a line it reads back, a command it builds, a log line). The
// error says which argument, not what it holds.
func checkProfileArgs(args []string) error {
	for i, a := range args {
		if strings.ContainsFunc(a, unicode.IsControl) {
			return fmt.Errorf("extension %s: argument %d holds a control character", ClusterProfileArgsExtension, i)
		}
	}
	return nil
}

// quoteName quotes a variable name a profile gave, cut to a length that
// keeps an error readable.
func quoteName(name string) string {
	const limit = 64
	if len(name) > limit {
		return fmt.Sprintf("%q…", name[:limit])
	}
	return fmt.Sprintf("%q", name)
}
