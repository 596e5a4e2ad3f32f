package configwatcher

import (
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/config"
)

var (
	// ErrSecretInvalid means a selected Secret cannot be turned into a
	// cluster config: a data key is missing or empty, its kubeconfig or
	// JSON does not parse, its server is no URL, its certificates do not
	// load. Kubeconfig problems also wrap config.ErrInvalidKubeconfig (or
	// config.ErrNoContexts); refused credentials wrap
	// config.ErrAuthPluginRefused or config.ErrFileReferenceRefused instead.
	ErrSecretInvalid = errors.New("cluster Secret is invalid")

	// ErrSecretDuplicateCluster means two Secrets claim the same cluster
	// name. The cluster stays with the Secret that already serves it;
	// else a Secret that can be read wins over a broken one, and among
	// those left, the one whose namespace/name sorts first.
	ErrSecretDuplicateCluster = errors.New("cluster name claimed by more than one Secret")
)

// SecretWatcher is a ConfigWatcher over clusters described by Secrets on a
// host cluster, in one of two formats used by other multi-cluster tools, so
// that a fleet registered for them works with mccr as it is (with one
// difference: Argo CD, with its in-cluster server enabled, serves an
// implicit "in-cluster" cluster when no Secret names
// ArgoCDInClusterServer; the watcher has no implicit cluster, so write
// that Secret, or run the host as a member with the Server's
// Options.HostMember):
//
//   - multicluster-runtime (the default): Secrets labelled
//     sigs.k8s.io/multicluster-runtime-kubeconfig=true holding a kubeconfig
//     under "kubeconfig". The cluster is named after the Secret, and reached
//     through the kubeconfig's current context (or its only context).
//   - Argo CD (ArgoCDFormat): Secrets labelled
//     argocd.argoproj.io/secret-type=cluster holding "name", "server" and
//     "config", a JSON object with bearerToken, username and password,
//     tlsClientConfig (caData, certData, keyData, insecure, serverName) and
//     proxyUrl; a Secret without "config" (or with an empty one) is read
//     as one with "{}", as Argo CD reads it: the server, reached with no
//     credentials. The cluster is named by "name". execProviderConfig
//     becomes an exec plugin, and awsAuthConfig an exec plugin running
//     `aws eks get-token` (the AWS CLI, which the controller's image must
//     then hold; Argo CD runs its own `argocd-k8s-auth aws` instead), both
//     only with AllowAuthPlugins.
//
// The namespace, label and key are options. A config's Source.Object is
// "Secret <namespace>/<name>".
//
// It reads the Secrets through a controller-runtime cache restricted to the
// namespace and to the label (no polling; WatchAllNamespaces widens it),
// and on every change works out the whole fleet again and publishes only
// the difference: a rotated token or a new endpoint is one Updated event,
// a change that does not alter the config (an annotation, say) is none.
// In the Argo CD format, "project", "shard", labels and annotations are
// Properties (see ArgoCDProjectProperty): a change to them is an Updated
// event that a Server takes without restarting the member. "namespaces"
// and "clusterResources" are the config's Scope: the member watches those
// namespaces only, and cluster-scoped kinds only with clusterResources
// "true" (see config.Scope); a change of them restarts the member. A
// Secret annotated ArgoCDSkipReconcileAnnotation claims no cluster. A
// Secret whose server is ArgoCDInClusterServer is the host itself (see
// DisableArgoCDInCluster).
// Removing the Secret, or its label, is what removes a cluster.
//
// A Secret is untrusted input: whoever can write one chooses the server the
// controller talks to and the credentials it sends. So its credentials must
// be inline: a kubeconfig naming a token, certificate or key file is
// refused (config.ErrFileReferenceRefused) — a Secret has no directory,
// and such a path would send a local file of the controller to that server.
// Credentials that run programs are refused too (config.ErrAuthPluginRefused)
// unless AllowAuthPlugins is given.
//
// Problems — a missing key, a malformed kubeconfig or JSON, a name that
// config.ValidateName refuses, two Secrets claiming one cluster name — are
// reported on Errors naming the Secret (and the other Secret for a
// duplicate) as namespace/name, once per problem until it changes or goes
// away. They never quote the Secret's content. A cluster already published
// keeps its last good config while its Secret is broken: a Secret
// rewritten by mistake must not stop the controllers of a whole cluster.
// The other clusters are not affected.
//
// The identity the watcher runs as needs list and watch on secrets in the
// namespace (cluster-wide with WatchAllNamespaces).
type SecretWatcher struct {
	// The cache holds only the selected Secrets, trimmed to the keys read.
	hostCache
	opts SecretOptions
	// hostCfg is a copy of the config the watcher was given (sharing no
	// RateLimiter or ExecProvider with it: see ownHostConfig): in the Argo
	// CD format, how the cluster Argo CD runs in is reached.
	hostCfg *rest.Config

	// The fields below belong to the run goroutine.

	// claimed holds which Secret serves each cluster and the problems
	// reported; claims maps a Secret to the cluster name it last claimed,
	// so that a Secret whose name key breaks still keeps its cluster.
	claimed claimsState
	claims  map[string]string
}

var _ ConfigWatcher = (*SecretWatcher)(nil)

// NewSecretWatcher watches the cluster Secrets that opts select (see
// SecretOptions for the defaults) on the host cluster that hostCfg reaches.
// Like NewKubeFedWatcher, it returns at once without waiting for the host;
// the watcher publishes the clusters it finds as Added, then every change.
// Call Stop to end it.
func NewSecretWatcher(hostCfg *rest.Config, opts ...SecretOption) (*SecretWatcher, error) {
	o, err := newSecretOptions(opts)
	if err != nil {
		return nil, err
	}
	selector, err := labels.ValidatedSelectorFromSet(labels.Set{o.Label: o.LabelValue})
	if err != nil {
		return nil, fmt.Errorf("configwatcher: NewSecretWatcher: label %s=%s: %w", o.Label, o.LabelValue, err)
	}

	log := o.Logger.WithValues("format", o.Format.String())
	var namespaces map[string]cache.Config
	if o.AllNamespaces {
		log = log.WithValues("namespace", "*")
	} else {
		log = log.WithValues("namespace", o.Namespace)
		namespaces = map[string]cache.Config{o.Namespace: {}}
	}
	w := &SecretWatcher{
		opts:    o,
		claimed: newClaimsState(),
		claims:  map[string]string{},
	}
	if err := w.init(hostCfg, hostCacheSpec{
		what:       "Secret",
		quoteHost:  config.RedactURL,
		log:        log,
		schemes:    []func(*runtime.Scheme) error{corev1.AddToScheme},
		namespaces: namespaces,
		selector:   selector,
		transform:  w.transform,
		watched:    []hostWatched{{kind: "Secrets", obj: &corev1.Secret{}}},
		watching:   "watching cluster Secrets",
		sync:       w.sync,
	}); err != nil {
		return nil, err
	}
	w.hostCfg = ownHostConfig(hostCfg)
	w.start()
	return w, nil
}

// sync works out the fleet from the cache and publishes it. It returns
// false once the watcher is stopped; it never asks to be called again
// without a change.
func (w *SecretWatcher) sync() (time.Time, bool) {
	var list corev1.SecretList
	var opts []client.ListOption
	if !w.opts.AllNamespaces {
		opts = append(opts, client.InNamespace(w.opts.Namespace))
	}
	if listed, running := w.list("Secrets", &list, opts...); !listed {
		return time.Time{}, running
	}
	claims := make([]*claim, 0, len(list.Items))
	for i := range list.Items {
		s := &list.Items[i]
		ref := s.Namespace + "/" + s.Name
		c := claimSafely(w.log, "Secret", ref, ref, w.claims[ref], func() *claim { return w.claim(s) })
		if c == nil {
			continue
		}
		if c.name == "" {
			c.name = w.claims[c.ref] // a broken name key keeps the cluster it named
		}
		claims = append(claims, c)
	}
	if !w.claimed.publish(&w.hostCache, claims, func(c, owner *claim) error {
		return fmt.Errorf("configwatcher: Secret %s: cluster %s: %w (Secret %s keeps it)", c.ref, config.QuoteName(c.name), ErrSecretDuplicateCluster, owner.ref)
	}) {
		return time.Time{}, false
	}
	clear(w.claims)
	for _, c := range claims {
		if c.name != "" {
			w.claims[c.ref] = c.name
		}
	}
	return time.Time{}, true
}

// claim reads one Secret in the watcher's format; nil if it claims no
// cluster.
func (w *SecretWatcher) claim(s *corev1.Secret) *claim {
	ref := s.Namespace + "/" + s.Name
	c := &claim{ref: ref, id: ref}
	if w.opts.Format == ArgoCDSecretFormat {
		return w.argoCDClaim(s, c)
	}
	// A Secret whose deletion has started (a finalizer holds it) claims its
	// cluster no more, as multicluster-runtime's kubeconfig provider
	// removes the cluster then: whatever waits on the finalizer may count
	// on no controller acting on the cluster any more.
	if s.DeletionTimestamp != nil {
		return nil
	}
	c.name = s.Name
	cfg, err := secretKubeconfig(s.Data, w.opts.Key, w.opts.AllowAuthPlugins)
	if err != nil {
		c.err = fmt.Errorf("configwatcher: Secret %s: %w", ref, err)
		return c
	}
	c.cfg = &config.NamedConfig{Name: c.name, Config: cfg, Source: config.Source{Object: "Secret " + ref}}
	return c
}

// transform trims Secrets before they enter the cache: managed fields go,
// and only the keys the format reads are kept, so that whatever else the
// Secrets hold is not kept in memory.
func (w *SecretWatcher) transform(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	if s, ok := obj.(*corev1.Secret); ok {
		keep := []string{w.opts.Key}
		if w.opts.Format == ArgoCDSecretFormat {
			keep = argoCDDataKeys
		}
		for k := range s.Data {
			if !slices.Contains(keep, k) {
				delete(s.Data, k)
			}
		}
		s.StringData = nil
		if w.opts.Format == ArgoCDSecretFormat {
			// Annotations become Properties, but for kubectl's copy of
			// the whole Secret, credentials included.
			delete(s.Annotations, corev1.LastAppliedConfigAnnotation)
		} else {
			s.Annotations = nil
		}
	}
	return obj, nil
}
