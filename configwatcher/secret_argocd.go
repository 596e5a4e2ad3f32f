package configwatcher

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/mccr-dev/mccr/config"
)

// Data keys of an Argo CD cluster Secret.
const (
	argoCDNameKey    = "name"
	argoCDServerKey  = "server"
	argoCDConfigKey  = "config"
	argoCDProjectKey = "project"
	argoCDShardKey   = "shard"
)

// ArgoCDInClusterServer is the server Argo CD gives the cluster it runs in
// (its KubernetesInternalAPIServerAddr). A cluster Secret with this server
// (as written, trailing slashes aside, as Argo CD compares it) means that
// cluster, whatever its name; Argo CD reaches it with its own
// in-cluster credentials unless the Secret's config carries a username,
// password or bearer token.
const ArgoCDInClusterServer = "https://kubernetes.default.svc"

// ErrArgoCDInClusterDisabled means an Argo CD cluster Secret names
// ArgoCDInClusterServer while the watcher was given DisableArgoCDInCluster,
// as Argo CD refuses it with cluster.inClusterEnabled: "false" in argocd-cm.
var ErrArgoCDInClusterDisabled = errors.New("Argo CD's in-cluster server is disabled") //nolint:staticcheck // names the product

// Property keys under which an Argo CD cluster Secret's attributes reach
// reconcilers (config.NamedConfig.Properties, server.Server.ClusterProperties).
const (
	// ArgoCDProjectProperty is the Secret's "project": the Argo CD project
	// the cluster is scoped to.
	ArgoCDProjectProperty = "argocd.argoproj.io/project"
	// ArgoCDShardProperty is the Secret's "shard", the application
	// controller shard Argo CD assigns the cluster to, as a decimal
	// integer. A shard that is not an integer as written (" 1" and "1\n"
	// are not) is left out, as Argo CD ignores it.
	ArgoCDShardProperty = "argocd.argoproj.io/shard"
	// ArgoCDLabelPropertyPrefix precedes the key of each of the Secret's
	// labels but ArgoCDSecretLabel: label team=a is property "label:team".
	ArgoCDLabelPropertyPrefix = "label:"
	// ArgoCDAnnotationPropertyPrefix precedes the key of each of the
	// Secret's annotations but kubectl's last-applied-configuration (a
	// copy of the whole Secret, credentials included) and Argo CD's
	// "managed-by" marker, the two Argo CD itself leaves out of a cluster's
	// annotations, and but any annotation whose value carries the
	// Secret's credentials (another tool's copy of the Secret, say): the
	// Secret's config as stored (base64) or as written, or its token,
	// password or client key. Properties are shown by Status and the fleet
	// page; credentials never are.
	ArgoCDAnnotationPropertyPrefix = "annotation:"
)

// argoCDManagedByAnnotation marks the Secrets Argo CD wrote itself.
const argoCDManagedByAnnotation = "managed-by"

// argoCDDataKeys are the data keys the watcher reads; the cache keeps only
// these.
var argoCDDataKeys = []string{argoCDNameKey, argoCDServerKey, argoCDConfigKey, argoCDProjectKey, argoCDShardKey, argoCDNamespacesKey, argoCDClusterResourcesKey}

// argoCDClaim reads one Argo CD cluster Secret into c. It returns nil for
// a Secret whose deletion has started when ArgoCDDeleteOnDeletionStart is
// set, and for one annotated ArgoCDSkipReconcileAnnotation: it claims no
// cluster any more, so its cluster leaves.
func (w *SecretWatcher) argoCDClaim(s *corev1.Secret, c *claim) *claim {
	deleting := s.DeletionTimestamp != nil
	if deleting && w.opts.ArgoCDDeleteOnDeletionStart {
		return nil
	}
	if argoCDSkipped(s) {
		if name := w.claims[c.ref]; name != "" {
			w.log.Info("cluster Secret annotated "+ArgoCDSkipReconcileAnnotation+": its cluster leaves until the annotation goes", "cluster", name, "source", "Secret "+c.ref)
		}
		return nil
	}
	// Argo CD keeps serving a cluster whose Secret waits for finalizers;
	// a problem of such a Secret is expected and not worth a report.
	c.quiet = deleting
	var inCluster *rest.Config
	if !w.opts.ArgoCDInClusterDisabled {
		inCluster = w.hostCfg
	}
	var cfg *rest.Config
	var err error
	var scope config.Scope
	c.name, cfg, err = argoCDConfig(s.Data, w.opts.AllowAuthPlugins, inCluster)
	if err == nil {
		scope, err = argoCDScope(c.name, s.Data)
	}
	if err != nil {
		c.err = fmt.Errorf("configwatcher: Secret %s: %w", c.ref, err)
		return c
	}
	c.cfg = &config.NamedConfig{
		Name:       c.name,
		Config:     cfg,
		Source:     config.Source{Object: "Secret " + c.ref},
		Properties: argoCDProperties(s, cfg),
		Scope:      scope,
	}
	return c
}

// argoCDProperties is what an Argo CD cluster Secret says about its
// cluster beyond how to reach it; nil if nothing. cfg is the config read
// from it (nil if none): no annotation carrying its credentials is kept.
func argoCDProperties(s *corev1.Secret, cfg *rest.Config) map[string]string {
	p := map[string]string{}
	if v := strings.TrimSpace(string(s.Data[argoCDProjectKey])); v != "" && propertyValueOK(v) {
		p[ArgoCDProjectProperty] = v
	}
	// The shard as written, as Argo CD reads it (strconv.Atoi): " 1" or
	// "1\n" is no shard to Argo CD, so none here either.
	if v := string(s.Data[argoCDShardKey]); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			p[ArgoCDShardProperty] = strconv.FormatInt(n, 10)
		}
	}
	meta := map[string]string{}
	for k, v := range s.Labels {
		if k != ArgoCDSecretLabel {
			meta[ArgoCDLabelPropertyPrefix+k] = v
		}
	}
	secrets := argoCDSecrets(s, cfg)
	for k, v := range s.Annotations {
		if k == corev1.LastAppliedConfigAnnotation || k == argoCDManagedByAnnotation {
			continue
		}
		if slices.ContainsFunc(secrets, func(secret string) bool { return strings.Contains(v, secret) }) {
			continue
		}
		meta[ArgoCDAnnotationPropertyPrefix+k] = v
	}
	addMetaProperties(p, meta) // bounded as in properties.go
	if len(p) == 0 {
		return nil
	}
	return p
}

// argoCDSecrets are the forms in which the Secret's credentials may be
// copied into an annotation: its config as stored (base64, as a copy of
// the object's data holds it) and as written, and the token, password and
// client key it carries, as written and as the config JSON encodes the
// key. Empty forms are left out.
func argoCDSecrets(s *corev1.Secret, cfg *rest.Config) []string {
	var out []string
	add := func(v string) {
		if v != "" {
			out = append(out, v)
		}
	}
	if raw := s.Data[argoCDConfigKey]; len(bytes.TrimSpace(raw)) > 0 {
		add(base64.StdEncoding.EncodeToString(raw))
		add(string(raw))
	}
	if cfg != nil {
		add(cfg.BearerToken)
		add(cfg.Password)
		if len(cfg.KeyData) > 0 {
			add(string(cfg.KeyData))
			add(base64.StdEncoding.EncodeToString(cfg.KeyData))
		}
	}
	return out
}

// argoCDInClusterConfig is how Argo CD reaches the cluster it runs in: with
// its own credentials (host, the config the watcher was given), or, when
// the Secret's config carries a username, password or bearer token, at the
// same address and with the same trust but with those credentials alone.
// The Secret's TLS client settings and plugins are ignored there, as Argo
// CD ignores them; its proxy and disableCompression apply (argoCDConfig
// sets them), as Argo CD applies them to every cluster.
//
// The config shares nothing client-go writes or counts with host: see
// ownHostConfig.
func argoCDInClusterConfig(host *rest.Config, ac *argoCDClusterConfig) *rest.Config {
	if ac.Username == "" && ac.Password == "" && ac.BearerToken == "" {
		return ownHostConfig(host)
	}
	cfg := rest.AnonymousClientConfig(host)
	cfg.RateLimiter = nil // shared by AnonymousClientConfig: see ownHostConfig
	cfg.Username, cfg.Password, cfg.BearerToken = ac.Username, ac.Password, ac.BearerToken
	return cfg
}

// ownHostConfig copies host for a member of its own. rest.CopyConfig
// shares the RateLimiter, which would make the member and whatever else
// uses host draw on one budget: the copy has none, and limits itself by
// its QPS and Burst, as the Server's HostMember does. CopyConfig shares
// the ExecProvider too and writes into it (its Config) on every copy, a
// data race between the configs sharing it: the copy gets a deep copy,
// and host is not written.
func ownHostConfig(host *rest.Config) *rest.Config {
	src := *host
	src.ExecProvider = nil
	cfg := rest.CopyConfig(&src)
	cfg.RateLimiter = nil
	if host.ExecProvider != nil {
		cfg.ExecProvider = host.ExecProvider.DeepCopy()
	}
	return cfg
}

// argoCDClusterConfig is the part of the JSON in an Argo CD cluster
// Secret's "config" key that says how to reach the cluster. Fields Argo CD
// adds later are ignored.
//
// As Argo CD reads it: awsAuthConfig, else execProviderConfig, else the
// username, password and bearer token say who the client is; a plugin
// leaves the static credentials unused (a token left over from before the
// plugin would otherwise be sent, and the plugin never run).
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
	// ProvideClusterInfo hands the plugin the cluster (KUBERNETES_EXEC_INFO),
	// with Config as the cluster's exec extension (Argo CD 3.5).
	ProvideClusterInfo bool            `json:"provideClusterInfo,omitempty"`
	Config             json.RawMessage `json:"config,omitempty"`
}

// argoCDProxySchemes are the proxyUrl schemes Argo CD accepts.
var argoCDProxySchemes = []string{"http", "https", "socks5"}

// argoCDExecAPIVersion is the ExecCredential version asked of plugins that
// name none. Here mccr is more lenient than Argo CD, which passes an empty
// apiVersion through to client-go, which then refuses the plugin; it is
// also the version Argo CD asks of its own helper for awsAuthConfig.
const argoCDExecAPIVersion = "client.authentication.k8s.io/v1beta1"

// argoCDConfig reads an Argo CD cluster Secret: the cluster's name (also
// returned, when known, with an error about the rest, so that a broken
// Secret keeps its cluster) and its config. inCluster is the config of the
// cluster Argo CD runs in, for a Secret whose server is
// ArgoCDInClusterServer; nil refuses such a Secret.
func argoCDConfig(data map[string][]byte, allowPlugins bool, inCluster *rest.Config) (string, *rest.Config, error) {
	// The name is used as written, as Argo CD uses it: trimming it would
	// publish " a" as "a" instead of letting the name gate refuse it (the
	// Secret is then broken: see settleClaims).
	name := string(data[argoCDNameKey])
	if strings.TrimSpace(name) == "" {
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
		return fail("%q %s is not an http(s) URL", argoCDServerKey, config.QuoteAddress(server))
	}
	// Argo CD stores the server without trailing slashes and compares
	// it so, with nothing else trimmed: a server with a space or line
	// break around it is not the cluster Argo CD runs in, and must not
	// get the watcher's own credentials.
	isInCluster := strings.TrimRight(string(data[argoCDServerKey]), "/") == ArgoCDInClusterServer
	if isInCluster && inCluster == nil {
		return name, nil, fmt.Errorf("cluster %s: %w: its %q is %s (DisableArgoCDInCluster)", config.QuoteName(name), ErrArgoCDInClusterDisabled, argoCDServerKey, ArgoCDInClusterServer)
	}
	// No config (or an empty or blank one) is "{}": Argo CD parses the
	// config only when there is one, and reaches an outside server with
	// no credentials then.
	var ac argoCDClusterConfig
	if len(strings.TrimSpace(string(data[argoCDConfigKey]))) > 0 {
		if err := json.Unmarshal(data[argoCDConfigKey], &ac); err != nil {
			// encoding/json quotes at most a character of the input.
			return fail("%q is not a JSON cluster config: %s", argoCDConfigKey, config.Redact(err.Error()))
		}
	}
	// Argo CD applies the proxy and compression settings to every
	// cluster, the one it runs in included.
	var proxy func(*http.Request) (*url.URL, error)
	if ac.ProxyURL != "" {
		pu, err := url.Parse(ac.ProxyURL)
		if err != nil || pu.Host == "" || !slices.Contains(argoCDProxySchemes, pu.Scheme) {
			return fail("proxyUrl %s is not an absolute %s URL", config.QuoteAddress(ac.ProxyURL), strings.Join(argoCDProxySchemes, ", "))
		}
		proxy = http.ProxyURL(pu)
	}
	if isInCluster {
		cfg := argoCDInClusterConfig(inCluster, &ac)
		if proxy != nil {
			cfg.Proxy = proxy
		}
		cfg.DisableCompression = cfg.DisableCompression || ac.DisableCompression
		return name, cfg, nil
	}

	cfg := &rest.Config{
		Host:               server,
		DisableCompression: ac.DisableCompression,
		Proxy:              proxy,
		TLSClientConfig: rest.TLSClientConfig{
			Insecure:   ac.TLSClientConfig.Insecure,
			ServerName: ac.TLSClientConfig.ServerName,
			CertData:   ac.TLSClientConfig.CertData,
			KeyData:    ac.TLSClientConfig.KeyData,
			CAData:     ac.TLSClientConfig.CAData,
		},
	}
	// Argo CD's order: awsAuthConfig first (a Secret with both plugins
	// gets the AWS one), then execProviderConfig, then the static
	// credentials, which a plugin leaves unused.
	switch {
	case ac.AWSAuthConfig != nil:
		if !allowPlugins {
			return name, nil, fmt.Errorf("cluster %s: %w: its config has an awsAuthConfig", config.QuoteName(name), config.ErrAuthPluginRefused)
		}
		if ac.AWSAuthConfig.ClusterName == "" {
			return fail("awsAuthConfig has no clusterName")
		}
		cfg.ExecProvider = argoCDAWSExec(ac.AWSAuthConfig)
	case ac.ExecProviderConfig != nil:
		if !allowPlugins {
			return name, nil, fmt.Errorf("cluster %s: %w: its config has an execProviderConfig", config.QuoteName(name), config.ErrAuthPluginRefused)
		}
		if ac.ExecProviderConfig.Command == "" {
			return fail("execProviderConfig has no command")
		}
		cfg.ExecProvider = argoCDExec(ac.ExecProviderConfig)
	default:
		cfg.Username, cfg.Password, cfg.BearerToken = ac.Username, ac.Password, ac.BearerToken
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
	x := &clientcmdapi.ExecConfig{
		Command:            e.Command,
		Args:               slices.Clone(e.Args),
		Env:                env,
		APIVersion:         apiVersion,
		InstallHint:        e.InstallHint,
		ProvideClusterInfo: e.ProvideClusterInfo,
		InteractiveMode:    clientcmdapi.NeverExecInteractiveMode,
	}
	// "config": null is no config, as Argo CD decodes it.
	if raw := bytes.TrimSpace(e.Config); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		x.Config = &runtime.Unknown{Raw: slices.Clone(raw), ContentType: runtime.ContentTypeJSON}
	}
	return x
}

// argoCDAWSExec gets EKS tokens for an awsAuthConfig from the AWS CLI:
// `aws eks get-token --cluster-name <clusterName>`, assuming roleARN if set,
// with profile as AWS_PROFILE. Argo CD runs its own helper instead
// (`argocd-k8s-auth aws`, shipped in its image, signing the token with the
// AWS SDK); mccr does not ship one, so the controller's image needs the
// AWS CLI on its PATH, and AWS credentials it can find (a pod identity,
// an instance role, the profile's files).
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
