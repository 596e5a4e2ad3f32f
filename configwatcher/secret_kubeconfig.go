package configwatcher

import (
	"bytes"
	"errors"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/yamlshape"
)

// secretKubeconfig builds the config of a multicluster-runtime kubeconfig
// Secret: the kubeconfig under key, through its current context (or its
// only one), as clientcmd would, under the rules of package config for
// untrusted kubeconfigs with one difference: no file may be named at all.
// config's loaders resolve file paths against the kubeconfig's directory,
// and a Secret has none: any path would be a file of the controller's own.
//
// Error messages never quote the kubeconfig: a decoder's message may echo
// the input, so a kubeconfig that does not parse is only said not to.
func secretKubeconfig(data map[string][]byte, key string, allowPlugins bool) (*rest.Config, error) {
	raw := data[key]
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, fmt.Errorf("%w: no %q key, or an empty one", ErrSecretInvalid, key)
	}
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %w: key %q: %s", ErrSecretInvalid, config.ErrInvalidKubeconfig, key, fmt.Sprintf(format, args...))
	}
	kc, err := config.DecodeKubeconfig(raw)
	switch {
	case errors.Is(err, yamlshape.ErrTooManyNodes), errors.Is(err, yamlshape.ErrTooMuchText), errors.Is(err, yamlshape.ErrNotUTF8):
		return nil, fmt.Errorf("%w: key %q: %w", ErrSecretInvalid, key, err)
	case err != nil:
		return nil, invalid("does not parse as a kubeconfig")
	}
	name := kc.CurrentContext
	if name == "" {
		switch len(kc.Contexts) {
		case 0:
			return nil, fmt.Errorf("%w: key %q: %w", ErrSecretInvalid, key, config.ErrNoContexts)
		case 1:
			for n := range kc.Contexts {
				name = n
			}
		default:
			return nil, invalid("%d contexts and no current-context", len(kc.Contexts))
		}
	}
	kctx := kc.Contexts[name]
	if kctx == nil {
		return nil, invalid("current-context %s not found", config.QuoteName(name))
	}
	cluster := kc.Clusters[kctx.Cluster]
	if cluster == nil {
		return nil, invalid("context %s: cluster %s not found", config.QuoteName(name), config.QuoteName(kctx.Cluster))
	}
	if cluster.Server == "" {
		return nil, invalid("cluster %s has no server", config.QuoteName(kctx.Cluster))
	}
	var user *clientcmdapi.AuthInfo
	if kctx.AuthInfo != "" {
		if user = kc.AuthInfos[kctx.AuthInfo]; user == nil {
			return nil, invalid("context %s: user %s not found", config.QuoteName(name), config.QuoteName(kctx.AuthInfo))
		}
	}
	if err := secretFileReferences(kctx, cluster, user); err != nil {
		return nil, fmt.Errorf("key %q: %w", key, err)
	}
	if user != nil && !allowPlugins {
		switch {
		case user.Exec != nil:
			return nil, fmt.Errorf("key %q: %w: user %s has an exec plugin", key, config.ErrAuthPluginRefused, config.QuoteName(kctx.AuthInfo))
		case user.AuthProvider != nil:
			return nil, fmt.Errorf("key %q: %w: user %s has an auth-provider", key, config.ErrAuthPluginRefused, config.QuoteName(kctx.AuthInfo))
		}
	}
	// Only the context in use goes to clientcmd, so that what it reads is
	// exactly what was checked.
	one := clientcmdapi.NewConfig()
	one.Clusters[kctx.Cluster] = cluster
	if user != nil {
		one.AuthInfos[kctx.AuthInfo] = user
	}
	one.Contexts[name] = kctx
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*one, name, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, invalid("%s", config.WithoutSecrets(err, cluster, user))
	}
	if err := checkRESTConfig(cfg); err != nil {
		return nil, fmt.Errorf("%w: %w: key %q: %w", ErrSecretInvalid, config.ErrInvalidKubeconfig, key, err)
	}
	return cfg, nil
}

// secretFileReferences refuses the file paths of a kubeconfig read from a
// Secret, before anything could open them.
func secretFileReferences(kctx *clientcmdapi.Context, cluster *clientcmdapi.Cluster, user *clientcmdapi.AuthInfo) error {
	refs := []struct{ what, field, path string }{
		{"cluster " + config.QuoteName(kctx.Cluster), "certificate-authority", cluster.CertificateAuthority},
	}
	if user != nil {
		refs = append(refs,
			struct{ what, field, path string }{"user " + config.QuoteName(kctx.AuthInfo), "client-certificate", user.ClientCertificate},
			struct{ what, field, path string }{"user " + config.QuoteName(kctx.AuthInfo), "client-key", user.ClientKey},
			struct{ what, field, path string }{"user " + config.QuoteName(kctx.AuthInfo), "tokenFile", user.TokenFile},
		)
	}
	for _, r := range refs {
		if r.path != "" {
			return fmt.Errorf("%w: %s names a %s file; a kubeconfig in a Secret must hold its credentials inline (a Secret has no directory, and the path would be a local file of the controller)",
				config.ErrFileReferenceRefused, r.what, r.field)
		}
	}
	return nil
}

// checkRESTConfig finds out now what would otherwise fail only when the
// cluster's Manager is built, far from the Secret: a server that is no URL
// (and would later be quoted whole, password included), certificates that
// do not load, and an exec plugin client-go does not run
// (config.CheckExecPlugin). Auth providers are not checked: they are
// registered by the program that runs.
func checkRESTConfig(cfg *rest.Config) error {
	if _, _, err := rest.DefaultServerUrlFor(&rest.Config{Host: cfg.Host}); err != nil {
		return fmt.Errorf("server %s is neither a URL nor a host:port pair", config.QuoteAddress(cfg.Host))
	}
	if _, err := rest.TLSConfigFor(&rest.Config{Host: cfg.Host, TLSClientConfig: cfg.TLSClientConfig}); err != nil {
		return fmt.Errorf("TLS settings: %s", config.Redact(err.Error()))
	}
	return config.CheckExecPlugin(cfg.ExecProvider)
}
