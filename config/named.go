package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"slices"

	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/internal/credential"
)

// NamedConfig is one cluster of the fleet: its name, how to reach it, and
// where that knowledge came from.
type NamedConfig struct {
	// Name identifies the cluster within a Server. It is what reconcilers see
	// in their context and what the fan-out client routes by.
	Name string

	// Config is how to reach the cluster's API server.
	//
	// Its QPS and Burst are also the member's client-side rate limit, when
	// it sets one (see SetsRateLimit): a non-zero QPS, negative for no
	// limit as controller-runtime's ctrl.GetConfig leaves it, or a
	// RateLimiter. A QPS of zero, what every kubeconfig loaded with
	// clientcmd has, sets none; client-go would read it as 5 per second,
	// burst 10, but a Server gives such a member its Options.MemberQPS and
	// MemberBurst instead, by default no limit. The config's own setting
	// wins over the Server's. QPS, Burst and whether a RateLimiter is set
	// count in Fingerprint: changing them is an Update that restarts the
	// member.
	Config *rest.Config

	// Source says where the config came from, for error messages and logs.
	// It plays no part in Fingerprint.
	Source Source

	// Properties are what the source says about the cluster beyond how to
	// reach it: a ClusterProfile's status.properties (among them the
	// cluster ID "cluster.clusterset.k8s.io" and "clusterset.k8s.io"), for
	// example. Reconcilers read them with server.Server.ClusterProperties.
	// They count in Fingerprint but not in ReachFingerprint, so a change
	// to them alone is an Updated event that a Server takes without
	// restarting the member. Treat the map as read-only once published.
	Properties map[string]string

	// Scope is the part of the cluster the member watches: all of it
	// unless the source says otherwise (Argo CD's "namespaces" and
	// "clusterResources", for one). A member's caches are built for one
	// scope, so it counts in Fingerprint and in ReachFingerprint: a change
	// restarts the member.
	Scope Scope

	// refs are the files the kubeconfig named as certificate, key or token
	// (absolute, as written), whether or not Config still names them: a
	// directory's loader tells data files from broken kubeconfigs by them.
	refs []string

	// read are those of refs whose content Config holds: LoadFile read
	// them itself (see FilesRead).
	read []string
}

// Source tells where a NamedConfig came from. At most one of its forms is
// set: a kubeconfig File and Context, or an Object reference such as
// "KubeFedCluster kube-federation-system/member-1".
type Source struct {
	File    string
	Context string
	Object  string
}

// String renders the source for messages: "file /x/kubeconfig, context a",
// "KubeFedCluster ns/name", or "" when nothing is known.
func (s Source) String() string {
	// Files are named by whoever writes the directory, and objects by
	// whoever writes to the host: odd bytes are quoted.
	switch {
	case s.File != "" && s.Context != "":
		return fmt.Sprintf("file %s, context %s", quoteIfOdd(s.File), quoteIfOdd(s.Context))
	case s.File != "":
		return "file " + quoteIfOdd(s.File)
	case s.Object != "":
		return quoteIfOdd(s.Object)
	}
	return ""
}

// SetsRateLimit reports whether cfg sets its own client-side rate limit:
// a RateLimiter, or a QPS other than zero (a negative QPS is no limit).
// client-go reads a zero QPS as its default, 5 per second; mccr reads it as
// unset and lets the Server's defaults decide. A Burst without a QPS sets
// no limit of its own (the Server's QPS then applies with that Burst).
func SetsRateLimit(cfg *rest.Config) bool {
	return cfg != nil && (cfg.RateLimiter != nil || cfg.QPS != 0)
}

// NewNamedConfig names cfg. The config is used as given (not copied).
func NewNamedConfig(name string, cfg *rest.Config) *NamedConfig {
	return &NamedConfig{Name: name, Config: cfg}
}

// FilesRead returns the files whose content the config holds because its
// kubeconfig named them as certificate-authority, client-certificate,
// client-key or tokenFile and LoadFile read them itself, by the default rule
// (they lie in the kubeconfig's directory): absolute paths, as the
// kubeconfig names them (symlinks not followed). The config is only as
// current as these files were when it was loaded, so whoever keeps it
// current (configwatcher's FileWatcher) loads the kubeconfig again when one
// of them changes. Files left for client-go (AllowFileReferences) are not
// listed, nor are any for a config that no kubeconfig file gave.
func (c *NamedConfig) FilesRead() []string {
	if c == nil {
		return nil
	}
	return slices.Clone(c.read)
}

// String names the cluster and its source. It never includes credentials.
// A name that ValidateName refuses is quoted (QuoteName): such a config is
// refused wherever it goes, and is described only to say so.
func (c *NamedConfig) String() string {
	if c == nil {
		return "<nil>"
	}
	name := c.Name
	if ValidateName(name) != nil {
		name = QuoteName(name)
	}
	if src := c.Source.String(); src != "" {
		return fmt.Sprintf("%s (%s)", name, src)
	}
	return name
}

// Redacted describes the cluster for messages: its name, source and server,
// the server passed through RedactURL. It never includes credentials.
func (c *NamedConfig) Redacted() string {
	if c == nil {
		return "<nil>"
	}
	s := c.String()
	if c.Config != nil && c.Config.Host != "" {
		s += " at " + RedactURL(c.Config.Host)
	}
	return s
}

// Fingerprint returns a digest of everything in the config: its name, what
// decides how the cluster is reached (see ReachFingerprint), its
// Properties and its Source (a cluster that another file or object serves
// now, the same way, is described anew). Two NamedConfigs with the same Fingerprint describe the same
// cluster the same way, so "the same config again" can be told apart from a
// change even though *rest.Config values (with their func fields) never
// compare equal by pointer or reflect.DeepEqual.
func (c *NamedConfig) Fingerprint() string {
	return c.fingerprint(true, true)
}

// ReachFingerprint returns a digest of what decides how the cluster is
// reached and what of it is watched: name, endpoint, credentials, TLS
// settings, proxy URL, rate limits, Scope. Two NamedConfigs with the same
// ReachFingerprint reach the same cluster the same way, whatever their
// Properties.
//
// Func-valued fields (Dial, WrapTransport, Proxy, …) cannot be compared; only
// whether they are set counts. The digest is one-way: it does not reveal the
// credentials it covers.
func (c *NamedConfig) ReachFingerprint() string {
	return c.fingerprint(false, true)
}

// ConnectionFingerprint returns a digest of what decides how the cluster
// is reached apart from the credentials a running member takes in place:
// ReachFingerprint without a bearer token, token file, username and
// password — unless an exec plugin or an auth provider is set, which
// supply credentials of their own, and then these count too. Two configs
// of one name with the same ConnectionFingerprint and different
// ReachFingerprints differ in those credentials alone (a rotated token): a
// Server swaps them into the running member instead of restarting it.
func (c *NamedConfig) ConnectionFingerprint() string {
	return c.fingerprint(false, false)
}

// fingerprint digests the config; without properties, its Properties and
// Source are left out, and without credentials, the credentials a running member
// takes in place (see ConnectionFingerprint).
func (c *NamedConfig) fingerprint(properties, credentials bool) string {
	h := sha256.New()
	writeJSON(h, c.Name)
	if c.Config != nil {
		cfg := c.Config
		if !credentials && credential.Holdable(cfg) {
			cfg = &rest.Config{}
			*cfg = *c.Config // a shallow copy: only its fields are read
			cfg.BearerToken, cfg.BearerTokenFile, cfg.Username, cfg.Password = "", "", "", ""
		}
		writeJSON(h, fingerprintFields(cfg))
	}
	// The whole cluster adds nothing: digests stay what they were.
	if scope := c.Scope.fingerprint(); scope != nil {
		writeJSON(h, scope)
	}
	// Without Properties the digest is what it was before they existed.
	if properties && len(c.Properties) > 0 {
		writeJSON(h, c.Properties) // encoding/json sorts map keys
	}
	if properties && c.Source != (Source{}) {
		writeJSON(h, c.Source)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// writeJSON adds v's JSON encoding to h. A hash never fails a write, so the
// only error is a value JSON cannot hold (a NaN or infinite QPS); the
// encoder then writes nothing, and the error's text goes in instead, so that
// the digest is still the same each time for the same config.
func writeJSON(h hash.Hash, v any) {
	if err := json.NewEncoder(h).Encode(v); err != nil {
		_, _ = io.WriteString(h, err.Error()) // a hash's Write never fails
	}
}

// fingerprintFields lists what Fingerprint covers. A field added to
// rest.Config that changes how a cluster is reached belongs here.
func fingerprintFields(cfg *rest.Config) any {
	tls := cfg.TLSClientConfig
	var proxyURL string
	if cfg.Proxy != nil {
		// The usual Proxy is http.ProxyURL(u); ask it for a fixed request so
		// that a changed proxy address counts as a change.
		proxyURL = proxyFor(cfg)
	}
	return struct {
		Host, APIPath, UserAgent                string
		ContentType, AcceptContentTypes         string
		Username, Password                      string
		BearerToken, BearerTokenFile            string
		Impersonate                             rest.ImpersonationConfig
		AuthProvider                            any
		ExecProvider                            any
		Insecure                                bool
		ServerName, CertFile, KeyFile, CAFile   string
		CertData, KeyData, CAData               []byte
		NextProtos                              []string
		DisableCompression                      bool
		QPS                                     float32
		Burst                                   int
		Timeout                                 int64
		Proxy                                   string
		HasDial, HasWrapTransport, HasTransport bool
		HasRateLimiter, HasWarnHandler          bool
	}{
		cfg.Host, cfg.APIPath, cfg.UserAgent,
		cfg.ContentType, cfg.AcceptContentTypes,
		cfg.Username, cfg.Password,
		cfg.BearerToken, cfg.BearerTokenFile,
		cfg.Impersonate,
		cfg.AuthProvider,
		execFields(cfg.ExecProvider),
		tls.Insecure,
		tls.ServerName, tls.CertFile, tls.KeyFile, tls.CAFile,
		tls.CertData, tls.KeyData, tls.CAData,
		tls.NextProtos,
		cfg.DisableCompression,
		cfg.QPS,
		cfg.Burst,
		int64(cfg.Timeout),
		proxyURL,
		cfg.Dial != nil, cfg.WrapTransport != nil, cfg.Transport != nil,
		cfg.RateLimiter != nil, cfg.WarningHandler != nil || cfg.WarningHandlerWithContext != nil,
	}
}
