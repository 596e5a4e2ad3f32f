package configwatcher

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/mccr-dev/mccr/config"
)

// Data keys of an Argo CD cluster Secret.
const (
	argoCDNameKey   = "name"
	argoCDServerKey = "server"
	argoCDConfigKey = "config"
)

// argoCDClusterConfig is the part of the JSON in an Argo CD cluster
// Secret's "config" key that says how to reach the cluster. Fields Argo CD
// adds later are ignored.
type argoCDClusterConfig struct {
	Username           string                `json:"username,omitempty"`
	Password           string                `json:"password,omitempty"`
	BearerToken        string                `json:"bearerToken,omitempty"`
	TLSClientConfig    argoCDTLSClientConfig `json:"tlsClientConfig"`
	AWSAuthConfig      *argoCDAWSAuthConfig  `json:"awsAuthConfig,omitempty"`
	ExecProviderConfig *argoCDExecConfig     `json:"execProviderConfig,omitempty"`
	ProxyURL           string                `json:"proxyUrl,omitempty"`
	DisableCompression bool                  `json:"disableCompression,omitempty"`
}

// argoCDTLSClientConfig holds PEM data, base64-encoded in the JSON.
type argoCDTLSClientConfig struct {
	Insecure   bool   `json:"insecure"`
	ServerName string `json:"serverName,omitempty"`
	CertData   []byte `json:"certData,omitempty"`
	KeyData    []byte `json:"keyData,omitempty"`
	CAData     []byte `json:"caData,omitempty"`
}

type argoCDAWSAuthConfig struct {
	ClusterName string `json:"clusterName,omitempty"`
	RoleARN     string `json:"roleARN,omitempty"`
	Profile     string `json:"profile,omitempty"`
}

type argoCDExecConfig struct {
	Command     string            `json:"command,omitempty"`
	Args        []string          `json:"args,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	APIVersion  string            `json:"apiVersion,omitempty"`
	InstallHint string            `json:"installHint,omitempty"`
}

// argoCDExecAPIVersion is the ExecCredential version asked of plugins that
// name none, as Argo CD does.
const argoCDExecAPIVersion = "client.authentication.k8s.io/v1beta1"

// argoCDConfig reads an Argo CD cluster Secret: the cluster's name (also
// returned, when known, with an error about the rest, so that a broken
// Secret keeps its cluster) and its config.
func argoCDConfig(data map[string][]byte, allowPlugins bool) (string, *rest.Config, error) {
	name := strings.TrimSpace(string(data[argoCDNameKey]))
	if name == "" {
		return "", nil, fmt.Errorf("%w: no %q key, or an empty one", ErrSecretInvalid, argoCDNameKey)
	}
	fail := func(format string, args ...any) (string, *rest.Config, error) {
		return name, nil, fmt.Errorf("%w: cluster %s: %s", ErrSecretInvalid, config.QuoteName(name), fmt.Sprintf(format, args...))
	}
	server := strings.TrimSpace(string(data[argoCDServerKey]))
	if server == "" {
		return fail("no %q key, or an empty one", argoCDServerKey)
	}
	u, err := url.Parse(server)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fail("%q %s is not an http(s) URL", argoCDServerKey, quoteURL(server))
	}
	if len(strings.TrimSpace(string(data[argoCDConfigKey]))) == 0 {
		return fail("no %q key, or an empty one", argoCDConfigKey)
	}
	var ac argoCDClusterConfig
	if err := json.Unmarshal(data[argoCDConfigKey], &ac); err != nil {
		// encoding/json quotes at most a character of the input.
		return fail("%q is not a JSON cluster config: %s", argoCDConfigKey, config.Redact(err.Error()))
	}

	cfg := &rest.Config{
		Host:               server,
		Username:           ac.Username,
		Password:           ac.Password,
		BearerToken:        ac.BearerToken,
		DisableCompression: ac.DisableCompression,
		TLSClientConfig: rest.TLSClientConfig{
			Insecure:   ac.TLSClientConfig.Insecure,
			ServerName: ac.TLSClientConfig.ServerName,
			CertData:   ac.TLSClientConfig.CertData,
			KeyData:    ac.TLSClientConfig.KeyData,
			CAData:     ac.TLSClientConfig.CAData,
		},
	}
	if ac.ProxyURL != "" {
		pu, err := url.Parse(ac.ProxyURL)
		if err != nil || pu.Scheme == "" || pu.Host == "" {
			return fail("proxyUrl %s is not an absolute URL", quoteURL(ac.ProxyURL))
		}
		cfg.Proxy = http.ProxyURL(pu)
	}
	switch {
	case ac.ExecProviderConfig != nil && ac.AWSAuthConfig != nil:
		return fail("both execProviderConfig and awsAuthConfig are set")
	case ac.ExecProviderConfig != nil:
		if !allowPlugins {
			return name, nil, fmt.Errorf("cluster %s: %w: its config has an execProviderConfig", config.QuoteName(name), config.ErrAuthPluginRefused)
		}
		if ac.ExecProviderConfig.Command == "" {
			return fail("execProviderConfig has no command")
		}
		cfg.ExecProvider = argoCDExec(ac.ExecProviderConfig)
	case ac.AWSAuthConfig != nil:
		if !allowPlugins {
			return name, nil, fmt.Errorf("cluster %s: %w: its config has an awsAuthConfig", config.QuoteName(name), config.ErrAuthPluginRefused)
		}
		if ac.AWSAuthConfig.ClusterName == "" {
			return fail("awsAuthConfig has no clusterName")
		}
		cfg.ExecProvider = argoCDAWSExec(ac.AWSAuthConfig)
	}
	if err := checkRESTConfig(cfg); err != nil {
		return fail("%s", err)
	}
	return name, cfg, nil
}

// argoCDExec turns an execProviderConfig into client-go's exec settings.
// The plugin never prompts: there is nobody to answer.
func argoCDExec(e *argoCDExecConfig) *clientcmdapi.ExecConfig {
	env := make([]clientcmdapi.ExecEnvVar, 0, len(e.Env))
	for k, v := range e.Env {
		env = append(env, clientcmdapi.ExecEnvVar{Name: k, Value: v})
	}
	// Sorted, so that the same config has the same Fingerprint.
	slices.SortFunc(env, func(a, b clientcmdapi.ExecEnvVar) int { return strings.Compare(a.Name, b.Name) })
	apiVersion := e.APIVersion
	if apiVersion == "" {
		apiVersion = argoCDExecAPIVersion
	}
	return &clientcmdapi.ExecConfig{
		Command:         e.Command,
		Args:            slices.Clone(e.Args),
		Env:             env,
		APIVersion:      apiVersion,
		InstallHint:     e.InstallHint,
		InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}
}

// argoCDAWSExec gets EKS tokens from the AWS CLI, which is what Argo CD's
// own helper for awsAuthConfig wraps: `aws eks get-token`, assuming
// roleARN if set, with profile as AWS_PROFILE.
func argoCDAWSExec(a *argoCDAWSAuthConfig) *clientcmdapi.ExecConfig {
	args := []string{"eks", "get-token", "--cluster-name", a.ClusterName}
	if a.RoleARN != "" {
		args = append(args, "--role-arn", a.RoleARN)
	}
	e := &clientcmdapi.ExecConfig{
		Command:         "aws",
		Args:            args,
		APIVersion:      argoCDExecAPIVersion,
		InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}
	if a.Profile != "" {
		e.Env = []clientcmdapi.ExecEnvVar{{Name: "AWS_PROFILE", Value: a.Profile}}
	}
	return e
}
