// Package fuzzcheck holds what the fuzz targets of mccr's packages check
// about the messages a cluster inventory's data leads to.
//
// Kubeconfig files, Secrets, ClusterProfiles, KubeFedClusters and Cluster
// API objects are written by other people, and whatever mccr says about
// them ends up in logs, Errors channels, Status and events. So a message
// about such data must never carry its credentials, and must stay one
// printable line whatever bytes the data holds. The fuzz targets seed their
// inputs with the credentials below, so that a message quoting one is easy
// to see, and check every message with Leak and OneLine.
package fuzzcheck

import (
	"fmt"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Credentials the seed corpora carry, recognisable in any message.
const (
	Token    = "s3cr3t-TOKEN-xyz"
	Password = "s3cr3t-PASS-xyz"
	// KeyBody is the base64 body of the seeds' PEM private keys (not a key:
	// enough for a parser to read it as one and fail).
	KeyBody = "s3cr3tKEYs3cr3tKEYs3cr3tKEYs3cr3tKEY"
	// EnvValue is an exec plugin's environment value.
	EnvValue = "s3cr3t-ENV-xyz"
)

// MinSecret is the shortest credential looked for: a fuzzed credential of a
// few bytes ("v1", "true") is found in any message by chance.
const MinSecret = 8

// Leak returns the first of secrets that msg contains, if any, leaving out
// those shorter than MinSecret and those that one of public contains:
// public strings are what a message may quote (object and context names,
// paths, redacted servers), and a credential that is also one of them
// cannot be told apart from it.
func Leak(msg string, secrets, public []string) (string, bool) {
	for _, s := range secrets {
		if len(s) < MinSecret || !strings.Contains(msg, s) {
			continue
		}
		quoted := false
		for _, p := range public {
			if strings.Contains(p, s) {
				quoted = true
				break
			}
		}
		if !quoted {
			return s, true
		}
	}
	return "", false
}

// OneLine returns an error when msg cannot be printed as one log line as it
// is: it is not valid UTF-8, or holds a control character (a line break, an
// escape, NUL) or a bidi override, which could forge or hide log lines.
func OneLine(msg string) error {
	if !utf8.ValidString(msg) {
		return fmt.Errorf("message is not valid UTF-8: %q", msg)
	}
	for i, r := range msg {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			return fmt.Errorf("message holds %U at byte %d: %q", r, i, msg)
		}
	}
	return nil
}

// WithoutUserinfo returns a URL without what URLSecrets finds in it: the
// part of a server or proxy address a message may quote.
func WithoutUserinfo(raw string) string {
	for _, s := range URLSecrets(raw) {
		if s != "" {
			raw = strings.ReplaceAll(raw, s, "")
		}
	}
	return raw
}

// URLSecrets returns the userinfo of a URL, whole and its password alone:
// "https://admin:pw@host" carries both.
func URLSecrets(raw string) []string {
	var out []string
	if _, rest, ok := strings.Cut(raw, "://"); ok {
		if j := strings.IndexAny(rest, "/?#"); j >= 0 {
			rest = rest[:j]
		}
		if j := strings.LastIndex(rest, "@"); j >= 0 {
			out = append(out, rest[:j])
		}
	}
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok {
			out = append(out, pw)
		}
	}
	return out
}

// Kubeconfig returns the credentials of a parsed kubeconfig (tokens,
// passwords, client keys, auth-provider settings, exec plugin environment
// values, userinfo in servers and proxy URLs) and the strings a message
// about it may quote: the names of its contexts, clusters and users, its
// servers, proxies and file paths, its plugins' commands and arguments.
func Kubeconfig(cfg *clientcmdapi.Config) (secrets, public []string) {
	if cfg == nil {
		return nil, nil
	}
	public = append(public, cfg.CurrentContext)
	for name, c := range cfg.Contexts {
		public = append(public, name)
		if c != nil {
			public = append(public, c.Cluster, c.AuthInfo, c.Namespace)
		}
	}
	for name, c := range cfg.Clusters {
		public = append(public, name)
		if c == nil {
			continue
		}
		public = append(public, WithoutUserinfo(c.Server), c.TLSServerName, c.CertificateAuthority, WithoutUserinfo(c.ProxyURL))
		secrets = append(secrets, URLSecrets(c.Server)...)
		secrets = append(secrets, URLSecrets(c.ProxyURL)...)
	}
	for name, u := range cfg.AuthInfos {
		public = append(public, name)
		if u == nil {
			continue
		}
		public = append(public, u.ClientCertificate, u.ClientKey, u.TokenFile, u.Username, u.Impersonate, u.ImpersonateUID)
		public = append(public, u.ImpersonateGroups...)
		secrets = append(secrets, u.Token, u.Password, string(u.ClientKeyData))
		if u.AuthProvider != nil {
			public = append(public, u.AuthProvider.Name)
			for k, v := range u.AuthProvider.Config {
				public = append(public, k)
				secrets = append(secrets, v)
			}
		}
		if u.Exec != nil {
			public = append(public, u.Exec.Command, u.Exec.APIVersion, u.Exec.InstallHint)
			public = append(public, u.Exec.Args...)
			for _, e := range u.Exec.Env {
				public = append(public, e.Name)
				secrets = append(secrets, e.Value)
			}
		}
	}
	return secrets, public
}
