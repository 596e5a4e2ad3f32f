package config

import (
	"net/http"
	"net/url"

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
	}{e.Command, e.APIVersion, e.Args, e.Env, e.ProvideClusterInfo, e.InteractiveMode}
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
