package configwatcher

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// noEnviron is a controller environment that holds nothing.
func noEnviron() []string { return nil }

// envProvider is a provider whose env policy is policy, allowing allowed,
// with one variable of its own (OPERATOR_SET=operator).
func envProvider(policy AccessPolicy, allowed ...string) *AccessProvider {
	return &AccessProvider{
		Name: "p",
		ExecConfig: &clientcmdapi.ExecConfig{
			Command:    "/bin/plugin",
			APIVersion: "client.authentication.k8s.io/v1",
			Env:        []clientcmdapi.ExecEnvVar{{Name: "OPERATOR_SET", Value: "operator"}},
		},
		ProfileSourcedEnvVarsPolicy: policy,
		AllowedProfileEnvVars:       allowed,
	}
}

// envExt is a profile's env extension.
func envExt(t *testing.T, env map[string]string) map[string]json.RawMessage {
	t.Helper()
	raw, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]json.RawMessage{ClusterProfileEnvExtension: raw}
}

// The variables the rules must refuse, whatever shape the table takes:
// those a wrapper script, a loader, an interpreter or an SDK reads before
// or instead of the plugin's own work.
var mustRefuse = []string{
	"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "DYLD_INSERT_LIBRARIES", "DYLD_LIBRARY_PATH", "GLIBC_TUNABLES",
	"GCONV_PATH", "LOCPATH", "NLSPATH", "MALLOC_CHECK_", "MALLOC_CONF", "HOSTALIASES", "RES_OPTIONS", "TMPDIR",
	"BASH_ENV", "ENV", "BASH_XTRACEFD", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "IFS", "CDPATH",
	"GLOBIGNORE", "ZDOTDIR", "SHELL", "PSModulePath",
	"PATH", "HOME", "XDG_CONFIG_HOME", "PATHEXT", "COMSPEC", "USERPROFILE", "APPDATA", "TEMP", "TMP",
	"PAGER", "EDITOR", "BROWSER", "GIT_SSH_COMMAND", "GIT_EXEC_PATH", "GIT_CONFIG_GLOBAL", "SSH_ASKPASS",
	"NODE_OPTIONS", "NODE_PATH", "NODE_EXTRA_CA_CERTS", "NODE_TLS_REJECT_UNAUTHORIZED",
	"PYTHONSTARTUP", "PYTHONPATH", "PYTHONHOME", "PYTHONWARNINGS", "PYTHONBREAKPOINT",
	"PERL5OPT", "PERL5LIB", "PERLLIB", "RUBYOPT", "RUBYLIB", "GEM_PATH",
	"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH", "DOTNET_STARTUP_HOOKS", "CORECLR_PROFILER_PATH",
	"LUA_INIT", "PHPRC", "GODEBUG", "GOFLAGS", "GOTOOLCHAIN",
	"SSL_CERT_FILE", "SSL_CERT_DIR", "SSLKEYLOGFILE", "OPENSSL_CONF", "CURL_CA_BUNDLE", "CURL_HOME", "REQUESTS_CA_BUNDLE",
	"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "FTP_PROXY", "GRPC_PROXY",
	"KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_EXEC_INFO", "KUBECTL_EXTERNAL_DIFF", "KUBE_EDITOR",
	"AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_ROLE_ARN", "AWS_CA_BUNDLE", "AWS_CONFIG_FILE", "AWS_REGION",
	"AZURE_CLIENT_SECRET", "AZURE_CONFIG_DIR", "AAD_SERVICE_PRINCIPAL_CLIENT_SECRET", "IDENTITY_ENDPOINT", "MSI_ENDPOINT",
	"GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG", "CLOUDSDK_AUTH_ACCESS_TOKEN_FILE", "GCE_METADATA_HOST",
	"VAULT_ADDR", "KRB5CCNAME", "DOCKER_HOST",
	"SCW_API_URL", "SCW_SECRET_KEY", "SCW_ACCESS_KEY", "SCW_PROFILE", "SCW_CONFIG_PATH",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_CERTIFICATE",
	"SOCKS_SERVER", "SOCKS5_SERVER", "NIX_SSL_CERT_FILE", "ZONEINFO", "TZ",
}

// deniedNames lists the names the rules refuse: mustRefuse, every exact
// name of the table, and a name under every prefix of it.
func deniedNames() []string {
	names := slices.Clone(mustRefuse)
	for _, g := range profileEnvDeniedGroups {
		names = append(names, g.names...)
		for _, p := range g.prefixes {
			names = append(names, p+"X")
		}
	}
	return names
}

// caseVariants are name as it is, lower-cased, and with its first letter
// alone changed.
func caseVariants(name string) []string {
	out := []string{name, strings.ToLower(name)}
	for i, r := range name {
		if up, low := strings.ToUpper(string(r)), strings.ToLower(string(r)); up != low {
			flip := up
			if string(r) == up {
				flip = low
			}
			out = append(out, name[:i]+flip+name[i+len(flip):])
			break
		}
	}
	return out
}

// Every refused name, in every case, under both policies that read the
// extension, refuses the profile: the error names the variable and never
// its value. Under Ignore the extension is not read at all.
func TestProfileEnvRefused(t *testing.T) {
	const value = "$(touch /tmp/pwned)"
	for _, policy := range []AccessPolicy{AccessPolicyAppendIfNotExists, AccessPolicyReplace} {
		for _, denied := range deniedNames() {
			for _, name := range caseVariants(denied) {
				p := envProvider(policy)
				_, err := p.execWith(envExt(t, map[string]string{name: value, "TENANT": "t1"}), noEnviron)
				if err == nil {
					t.Errorf("%s: %s was accepted", policy, name)
					continue
				}
				msg := err.Error()
				if !strings.Contains(msg, `"`+name+`"`) || strings.Contains(msg, value) || strings.Contains(msg, "TENANT") ||
					!strings.Contains(msg, ClusterProfileEnvExtension) || !strings.Contains(msg, "allowedProfileEnvVars") {
					t.Errorf("%s: %s: error %q: want it to name the extension, the variable (not the value, not the benign one) and the option", policy, name, msg)
				}
			}
		}
	}

	// Several at once: one error naming each, in order.
	_, err := envProvider(AccessPolicyReplace).execWith(envExt(t, map[string]string{"PATH": "/x", "BASH_ENV": "/x", "OK": "1"}), noEnviron)
	if err == nil || !strings.Contains(err.Error(), `"BASH_ENV" (a shell's start-up file, option or prompt), "PATH" (where programs`) {
		t.Errorf("error %v: want both variables named with why, in order", err)
	}

	// Ignore (and the empty policy) read nothing.
	for _, policy := range []AccessPolicy{"", AccessPolicyIgnore} {
		e, err := envProvider(policy).execWith(envExt(t, map[string]string{"BASH_ENV": value, "bad=name": "x"}), noEnviron)
		if err != nil || !slices.Equal(e.Env, []clientcmdapi.ExecEnvVar{{Name: "OPERATOR_SET", Value: "operator"}}) {
			t.Errorf("policy %q: env %v, error %v; want the operator's alone", policy, e.Env, err)
		}
	}
}

// Names that are no variable names, NUL in a value, and one name given in
// two cases are refused, whatever the operator allows.
func TestProfileEnvMalformed(t *testing.T) {
	for _, c := range []struct {
		what string
		env  map[string]string
		says string
	}{
		{"empty name", map[string]string{"": "x"}, `"" (not a valid variable name)`},
		{"equals sign", map[string]string{"A=B": "x"}, "not a valid variable name"},
		{"NUL in the name", map[string]string{"A\x00B": "x"}, "not a valid variable name"},
		{"line break", map[string]string{"A\nB": "x"}, "not a valid variable name"},
		{"blank", map[string]string{"A B": "x"}, "not a valid variable name"},
		{"escape", map[string]string{"A\x1b[0m": "x"}, "not a valid variable name"},
		{"leading digit", map[string]string{"1A": "x"}, "not a valid variable name"},
		{"exported bash function", map[string]string{"BASH_FUNC_dirname%%": "() { touch /tmp/pwned; }"}, "not a valid variable name"},
		{"non-ASCII", map[string]string{"TENANTé": "x"}, "not a valid variable name"},
		{"dotdot", map[string]string{"..A": "x"}, "not a valid variable name"},
		{"long", map[string]string{strings.Repeat("A", 500) + "=": "x"}, "…"},
		{"NUL in the value", map[string]string{"TENANT": "a\x00b"}, `"TENANT" (its value holds a NUL byte)`},
		{"two cases", map[string]string{"Tenant": "a", "TENANT": "b"}, `given twice, as "TENANT" and "Tenant"`},
	} {
		for _, policy := range []AccessPolicy{AccessPolicyAppendIfNotExists, AccessPolicyReplace} {
			p := envProvider(policy, "TENANT", "LD_PRELOAD")
			_, err := p.execWith(envExt(t, c.env), noEnviron)
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Errorf("%s, %s: error %v, want one saying %q", c.what, policy, err, c.says)
			}
			if err != nil && strings.Contains(err.Error(), strings.Repeat("A", 65)) {
				t.Errorf("%s: the error quotes the whole long name", c.what)
			}
		}
	}
}

// What a profile's variables become: the operator's env and the
// controller's environment exist for AppendIfNotExists; Replace replaces
// the operator's env but leaves what only the controller's environment
// holds to it, unless the operator allowed the name; names compare
// without regard to case; an allowed name lifts the refused list for that
// name only.
func TestProfileEnvMerge(t *testing.T) {
	environ := func() []string {
		return []string{"INHERITED=controller", "Mixed_Case=controller", "OPERATOR_SET=controller", "AWS_REGION=controller", "=C:=C:\\"}
	}
	type env = []clientcmdapi.ExecEnvVar
	for _, c := range []struct {
		name    string
		policy  AccessPolicy
		allowed []string
		profile map[string]string
		want    env
		refused string
	}{
		{"append: new variables", AccessPolicyAppendIfNotExists, nil,
			map[string]string{"TENANT": "t1", "my.region": "r", "x-y": "z"},
			env{{Name: "OPERATOR_SET", Value: "operator"}, {Name: "TENANT", Value: "t1"}, {Name: "my.region", Value: "r"}, {Name: "x-y", Value: "z"}}, ""},
		{"append: the operator's env exists", AccessPolicyAppendIfNotExists, nil,
			map[string]string{"operator_set": "profile"},
			env{{Name: "OPERATOR_SET", Value: "operator"}}, ""},
		{"append: inherited exists", AccessPolicyAppendIfNotExists, nil,
			map[string]string{"INHERITED": "profile", "mixed_CASE": "profile", "NEW": "profile"},
			env{{Name: "NEW", Value: "profile"}, {Name: "OPERATOR_SET", Value: "operator"}}, ""},
		{"append: inherited exists even when allowed", AccessPolicyAppendIfNotExists, []string{"INHERITED", "aws_region"},
			map[string]string{"INHERITED": "profile", "AWS_REGION": "profile"},
			env{{Name: "OPERATOR_SET", Value: "operator"}}, ""},
		{"append: allowed and not inherited", AccessPolicyAppendIfNotExists, []string{"aws_default_region"},
			map[string]string{"AWS_DEFAULT_REGION": "eu"},
			env{{Name: "AWS_DEFAULT_REGION", Value: "eu"}, {Name: "OPERATOR_SET", Value: "operator"}}, ""},
		{"append: allowed is exact", AccessPolicyAppendIfNotExists, []string{"AWS_REGION"},
			map[string]string{"AWS_REGIONS": "eu"}, nil, `"AWS_REGIONS"`},
		{"replace: replaces the operator's env under its name, also over an inherited one", AccessPolicyReplace, nil,
			map[string]string{"operator_set": "profile"},
			env{{Name: "OPERATOR_SET", Value: "profile"}}, ""},
		{"replace: inherited stays", AccessPolicyReplace, nil,
			map[string]string{"INHERITED": "profile", "Mixed_case": "profile", "NEW": "profile"},
			env{{Name: "NEW", Value: "profile"}, {Name: "OPERATOR_SET", Value: "operator"}}, ""},
		{"replace: inherited replaced when allowed", AccessPolicyReplace, []string{"inherited", "AWS_REGION"},
			map[string]string{"INHERITED": "profile", "aws_region": "profile"},
			env{{Name: "AWS_REGION", Value: "profile"}, {Name: "INHERITED", Value: "profile"}, {Name: "OPERATOR_SET", Value: "operator"}}, ""},
		{"replace: refused still refused", AccessPolicyReplace, []string{"AWS_REGION"},
			map[string]string{"AWS_REGION": "eu", "PATH": "/tmp"}, nil, `"PATH"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := envProvider(c.policy, c.allowed...)
			e, err := p.execWith(envExt(t, c.profile), environ)
			switch {
			case c.refused != "":
				if err == nil || !strings.Contains(err.Error(), c.refused) {
					t.Errorf("error %v, want one naming %s", err, c.refused)
				}
			case err != nil:
				t.Fatal(err)
			case !slices.Equal(e.Env, c.want):
				t.Errorf("env %v, want %v", e.Env, c.want)
			}
			if p.ExecConfig.Env[0] != (clientcmdapi.ExecEnvVar{Name: "OPERATOR_SET", Value: "operator"}) || len(p.ExecConfig.Env) != 1 {
				t.Error("the operator's provider was changed")
			}
		})
	}
}

// The process environment is what the plugin inherits: a variable set in
// it counts as existing (the test's own environment, through execFor).
func TestProfileEnvInheritsTheProcess(t *testing.T) {
	t.Setenv("MCCR_TEST_INHERITED", "controller")
	e, err := envProvider(AccessPolicyReplace).execFor(envExt(t, map[string]string{"MCCR_TEST_INHERITED": "profile", "MCCR_TEST_NEW": "profile"}))
	if err != nil {
		t.Fatal(err)
	}
	want := []clientcmdapi.ExecEnvVar{{Name: "MCCR_TEST_NEW", Value: "profile"}, {Name: "OPERATOR_SET", Value: "operator"}}
	if !slices.Equal(e.Env, want) {
		t.Errorf("env %v, want %v", e.Env, want)
	}
}

// Profile arguments: appended only under Append; one holding a control
// character refuses the profile, naming its position, not its content.
func TestProfileArgs(t *testing.T) {
	p := &AccessProvider{Name: "p", ExecConfig: envProvider("").ExecConfig, ProfileSourcedCLIArgsPolicy: AccessPolicyAppend}
	args := func(a ...string) map[string]json.RawMessage {
		raw, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		return map[string]json.RawMessage{ClusterProfileArgsExtension: raw}
	}
	e, err := p.execWith(args("--tenant", "t1", "--region=eu west", "ünïcode"), noEnviron)
	if err != nil || !slices.Equal(e.Args, []string{"--tenant", "t1", "--region=eu west", "ünïcode"}) {
		t.Errorf("args %v, error %v", e.Args, err)
	}
	for _, bad := range []string{"a\x00b", "--x\nrm -rf /", "a\rb", "\x1b]0;title\x07", "tab\there", "\u0085next-line"} {
		_, err := p.execWith(args("--ok", bad), noEnviron)
		if err == nil || !strings.Contains(err.Error(), "argument 1 holds a control character") || strings.Contains(err.Error(), bad) {
			t.Errorf("argument %q: error %v, want one naming argument 1 and not quoting it", bad, err)
		}
	}
	for _, policy := range []AccessPolicy{"", AccessPolicyIgnore} {
		q := &AccessProvider{Name: "p", ExecConfig: p.ExecConfig, ProfileSourcedCLIArgsPolicy: policy}
		e, err := q.execWith(args("--exec", "sh", "a\x00b"), noEnviron)
		if err != nil || len(e.Args) != 0 {
			t.Errorf("policy %q: args %v, error %v; want none", policy, e.Args, err)
		}
	}
}

// allowedProfileEnvVars is read from the providers file, needs an env
// policy that reads the extension, and holds exact names only.
func TestAllowedProfileEnvVarsChecked(t *testing.T) {
	ok := []AccessProvider{*envProvider(AccessPolicyReplace, "AWS_REGION", "my.var")}
	if err := checkAccessProviders(ok); err != nil {
		t.Errorf("a valid allowance: %v", err)
	}
	for _, c := range []struct {
		p    *AccessProvider
		says string
	}{
		{envProvider(AccessPolicyIgnore, "AWS_REGION"), "needs a profileSourcedEnvVarsPolicy"},
		{envProvider("", "AWS_REGION"), "needs a profileSourcedEnvVarsPolicy"},
		{envProvider(AccessPolicyAppendIfNotExists, "AWS_*"), `"AWS_*" is not a variable name`},
		{envProvider(AccessPolicyAppendIfNotExists, ""), `"" is not a variable name`},
		{envProvider(AccessPolicyAppendIfNotExists, "A=B"), "not a variable name"},
	} {
		if err := checkAccessProviders([]AccessProvider{*c.p}); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("allowed %q, policy %q: error %v, want one saying %q", c.p.AllowedProfileEnvVars, c.p.ProfileSourcedEnvVarsPolicy, err, c.says)
		}
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "providers.json")
	content := `{"providers":[{"name":"p","execConfig":{"apiVersion":"client.authentication.k8s.io/v1","command":"/bin/p"},` +
		`"profileSourcedEnvVarsPolicy":"AppendIfNotExists","allowedProfileEnvVars":["AWS_REGION"]}]}`
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	ps, err := LoadAccessProviders(file)
	if err != nil || !slices.Equal(ps[0].AllowedProfileEnvVars, []string{"AWS_REGION"}) {
		t.Errorf("providers %+v, error %v", ps, err)
	}
	if err := os.WriteFile(file, []byte(strings.Replace(content, `"AppendIfNotExists"`, `"Ignore"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadAccessProviders(file); !errors.Is(err, ErrAccessProvidersInvalid) || !strings.Contains(err.Error(), file) {
		t.Errorf("allowance without a policy in a file: error %v, want ErrAccessProvidersInvalid naming the file", err)
	}
}
