package config

import (
	"encoding/json"
	"net/http"
	"net/url"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// execFields keeps the comparable part of an exec plugin's settings.
func execFields(e *clientcmdapi.ExecConfig) any {
	if e == nil {
		return nil
	}
	return struct {
		Command, APIVersion string
		Args                []string
		Env                 []clientcmdapi.ExecEnvVar
		ProvideClusterInfo  bool
		InteractiveMode     clientcmdapi.ExecInteractiveMode
		// ClusterInfo is the cluster's exec extension, which the plugin
		// gets with the cluster (KUBERNETES_EXEC_INFO): a change to it
		// alone changes what the plugin is asked for.
		ClusterInfo string
		// PluginPolicy decides whether client-go runs the command at all:
		// an allowlist tightened alone must reach the running member.
		// (client-go tags these fields json:"-": they are spelled out.)
		PolicyType              clientcmdapi.PolicyType
		Allowlist               []string
		StdinUnavailable        bool
		StdinUnavailableMessage string
	}{e.Command, e.APIVersion, e.Args, e.Env, e.ProvideClusterInfo, e.InteractiveMode, execClusterInfo(e.Config),
		e.PluginPolicy.PolicyType, allowlistOf(e.PluginPolicy), e.StdinUnavailable, e.StdinUnavailableMessage}
}

// allowlistOf is the commands an exec plugin policy allows.
func allowlistOf(p clientcmdapi.PluginPolicy) []string {
	if p.Allowlist == nil {
		return nil
	}
	cmds := make([]string, len(p.Allowlist))
	for i, a := range p.Allowlist {
		cmds[i] = a.Command
	}
	return cmds
}

// execClusterInfo is the content of an exec extension, as it would be
// handed to the plugin.
func execClusterInfo(o runtime.Object) string {
	if o == nil {
		return ""
	}
	if u, ok := o.(*runtime.Unknown); ok {
		return string(u.Raw)
	}
	b, err := json.Marshal(o)
	if err != nil {
		return "error: " + err.Error()
	}
	return string(b)
}

// proxyFor asks cfg.Proxy which proxy it would use for the cluster's host.
func proxyFor(cfg *rest.Config) string {
	u, err := url.Parse(cfg.Host)
	if err != nil || u.Host == "" {
		u = &url.URL{Scheme: "https", Host: cfg.Host}
	}
	p, err := cfg.Proxy(&http.Request{URL: u})
	if err != nil {
		return "error: " + err.Error()
	}
	if p == nil {
		return "direct"
	}
	return p.String()
}
