package configwatcher

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// pluginEnviron is the environment an exec plugin built from e starts
// with, as client-go composes it (the controller's environment, then the
// ExecConfig's env) and as the operating system hands it over: the env
// command prints it.
func pluginEnviron(t *testing.T, environ []string, e *clientcmdapi.ExecConfig) []string {
	t.Helper()
	envCmd, err := exec.LookPath("env")
	if err != nil {
		t.Fatalf("the env command is needed: %v", err)
	}
	env := slices.Clone(environ)
	for _, v := range e.Env {
		env = append(env, v.Name+"="+v.Value)
	}
	cmd := exec.CommandContext(t.Context(), envCmd)
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
}

// TestProfileEnvAttackNames: names an attacker writing a profile's status
// would try, in every spelling, under every policy. Under AppendIfNotExists
// and Replace each refuses the profile, naming the variable and not its
// value; under Ignore (and the empty policy) nothing of the profile is
// read. Names that are no variable names — empty, with '=' or NUL, or
// look-alikes made of other characters (full-width letters, a zero-width
// space, a no-break space, a long s that upper-cases to S, a Greek Eta
// standing for H) — are refused even when the operator allows the name
// they imitate, so that upper-casing cannot turn one into an allowed name.
func TestProfileEnvAttackNames(t *testing.T) {
	const value = "$(touch /tmp/pwned)"
	denied := []string{
		"LD_AUDIT", "LD_PRELOAD", "GCONV_PATH", "NODE_OPTIONS", "PYTHONWARNINGS", "PERL5OPT", "RUBYOPT",
		"JAVA_TOOL_OPTIONS", "GIT_SSH_COMMAND", "OS_AUTH_URL", "os_password", "DIGITALOCEAN_ACCESS_TOKEN", "TELEPORT_AUTH", "HTTPLIB2_CA_CERTS", "ADAL_PYTHON_SSL_NO_VERIFY", "MUSL_LOCPATH", "GNUTLS_SYSTEM_PRIORITY_FILE", "HTTPS_PROXY", "http_proxy", "Https_Proxy", "SSL_CERT_FILE",
		"KUBECONFIG", "HOME", "LD_PRELOAD.", "BASH_ENV", "GLIBC_TUNABLES", "KUBERNETES_SERVICE_HOST",
	}
	for _, policy := range []AccessPolicy{AccessPolicyAppendIfNotExists, AccessPolicyReplace} {
		for _, d := range denied {
			for _, name := range []string{d, strings.ToLower(d), strings.ToUpper(d)} {
				_, err := envProvider(policy).execWith(envExt(t, map[string]string{name: value}), noEnviron)
				if err == nil {
					t.Errorf("%s: %q accepted", policy, name)
					continue
				}
				if msg := err.Error(); !strings.Contains(msg, `"`+name+`"`) || strings.Contains(msg, value) {
					t.Errorf("%s: %q: error %q should name the variable and not its value", policy, name, msg)
				}
			}
		}
	}

	malformed := []struct{ name, imitates string }{
		{"", ""},
		{"A=B", "A"},
		{"LD_PRELOAD=/tmp/x.so", "LD_PRELOAD"},
		{"TENANT\x00LD_PRELOAD", "TENANT"},
		{"\x00", ""},
		{"BASH_FUNC_foo%%", "BASH_FUNC_foo"},
		{"BASH_FUNC_foo()", "BASH_FUNC_foo"},
		{"ＬＤ_PRELOAD", "LD_PRELOAD"},
		{"LD_PRELOAD\u200b", "LD_PRELOAD"},
		{"HOME\u00a0", "HOME"},
		{"\u017fSL_CERT_FILE", "SSL_CERT_FILE"}, // strings.ToUpper("ſ") == "S"
		{"PAT\u0397", "PATH"},
		{"KUBECONFI\u212a", "KUBECONFIG"}, // the Kelvin sign lower-cases to k
		{"TENANT\n", "TENANT"},
		{" TENANT", "TENANT"},
	}
	for _, policy := range []AccessPolicy{AccessPolicyAppendIfNotExists, AccessPolicyReplace} {
		for _, m := range malformed {
			allowed := []string{"TENANT"}
			if m.imitates != "" && validEnvName(m.imitates) {
				allowed = append(allowed, m.imitates)
			}
			_, err := envProvider(policy, allowed...).execWith(envExt(t, map[string]string{m.name: value}), noEnviron)
			if err == nil || !strings.Contains(err.Error(), "not a valid variable name") || strings.Contains(err.Error(), value) {
				t.Errorf("%s: %q (allowed %q): error %v, want it refused as no valid variable name", policy, m.name, allowed, err)
			}
		}
	}

	everything := map[string]string{}
	for _, d := range denied {
		everything[d] = value
	}
	for _, m := range malformed {
		everything[m.name] = value
	}
	for _, policy := range []AccessPolicy{"", AccessPolicyIgnore} {
		e, err := envProvider(policy).execWith(envExt(t, everything), noEnviron)
		if err != nil || !slices.Equal(e.Env, []clientcmdapi.ExecEnvVar{{Name: "OPERATOR_SET", Value: "operator"}}) {
			t.Errorf("policy %q: env %v, error %v; want the operator's alone", policy, e.Env, err)
		}
	}
}

// TestProfileEnvAppendKeepsTheControllersVariables: under
// AppendIfNotExists, a variable the controller's process has (set with
// t.Setenv, read through execFor) is never overridden, whatever the case
// the profile spells it in, and even when the operator allows the name;
// the plugin started from the result sees the controller's value.
func TestProfileEnvAppendKeepsTheControllersVariables(t *testing.T) {
	t.Setenv("MCCR_HX_TENANT", "controller")
	for _, name := range []string{"MCCR_HX_TENANT", "mccr_hx_tenant", "Mccr_Hx_Tenant"} {
		for _, allowed := range [][]string{nil, {"MCCR_HX_TENANT"}} {
			p := envProvider(AccessPolicyAppendIfNotExists, allowed...)
			e, err := p.execFor(envExt(t, map[string]string{name: "profile", "MCCR_HX_NEW": "profile"}))
			if err != nil {
				t.Fatal(err)
			}
			want := []clientcmdapi.ExecEnvVar{{Name: "MCCR_HX_NEW", Value: "profile"}, {Name: "OPERATOR_SET", Value: "operator"}}
			if !slices.Equal(e.Env, want) {
				t.Errorf("%s, allowed %q: env %v, want %v", name, allowed, e.Env, want)
			}
			seen := pluginEnviron(t, os.Environ(), e)
			profiles := func(kv string) bool { return strings.EqualFold(kv, name+"=profile") }
			if !slices.Contains(seen, "MCCR_HX_TENANT=controller") || slices.ContainsFunc(seen, profiles) {
				t.Errorf("%s, allowed %q: the plugin's environment has the profile's value of the controller's variable", name, allowed)
			}
		}
	}
}

// TestProfileEnvReplaceCannotUnmaskTheController: an operator's provider
// env that overrides a variable of the controller's own environment (a
// credential the plugin must not use, blanked) is replaced, under Replace,
// by a profile that spells the name in another case. Where names are
// told apart by case, the profile's spelling used to be another variable:
// the operator's override was dropped and the plugin ran with the
// controller's own credential, which no profile may set. Now the
// profile's value takes the operator's variable's place, under its
// spelling; and a variable of the controller's that the operator allows a
// profile to override is overridden whatever the profile's spelling.
func TestProfileEnvReplaceCannotUnmaskTheController(t *testing.T) {
	environ := []string{"PLUGIN_TOKEN=controller-admin-token", "TENANT=controller"}
	p := envProvider(AccessPolicyReplace, "TENANT")
	p.ExecConfig.Env = []clientcmdapi.ExecEnvVar{{Name: "PLUGIN_TOKEN", Value: ""}}
	e, err := p.execWith(envExt(t, map[string]string{"plugin_token": "profile", "tenant": "profile"}), func() []string { return environ })
	if err != nil {
		t.Fatal(err)
	}
	seen := pluginEnviron(t, environ, e)
	if slices.Contains(seen, "PLUGIN_TOKEN=controller-admin-token") {
		t.Errorf("the plugin runs with the controller's PLUGIN_TOKEN, which the operator blanked: environment %q", seen)
	}
	for _, want := range []string{"PLUGIN_TOKEN=profile", "TENANT=profile"} {
		if !slices.Contains(seen, want) {
			t.Errorf("the plugin's environment %q lacks %s", seen, want)
		}
	}
	for _, kv := range seen {
		if strings.HasPrefix(kv, "plugin_token=") || strings.HasPrefix(kv, "tenant=") {
			t.Errorf("the plugin's environment has %q: the profile's spelling became another variable", kv)
		}
	}
}
