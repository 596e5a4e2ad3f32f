package configwatcher

import (
	"errors"
	"fmt"
	"maps"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/mccr-dev/mccr/config"
)

var (
	// ErrClusterProfileNotInstalled means the host cluster does not serve
	// the ClusterProfile CRD (clusterprofiles.multicluster.x-k8s.io,
	// v1alpha1). The watcher retries until it is installed.
	ErrClusterProfileNotInstalled = errors.New("the ClusterProfile CRD (clusterprofiles.multicluster.x-k8s.io, v1alpha1) is not installed")

	// ErrClusterProfileNoAccessProvider means a ClusterProfile lists no
	// access provider that the operator's access providers know, so there
	// is no plugin to get credentials from.
	ErrClusterProfileNoAccessProvider = errors.New("no access provider the operator knows")

	// ErrClusterProfileInvalid means the access provider chosen for a
	// ClusterProfile cannot be turned into a config (no server or one that
	// is no URL, a CA that is no PEM certificate, a file path, TLS
	// verification turned off, a bad proxy URL or extension), or its
	// status does not parse.
	ErrClusterProfileInvalid = errors.New("invalid ClusterProfile")

	// ErrClusterProfileDuplicateCluster means two ClusterProfiles are given
	// the same cluster name. The cluster stays with the profile that
	// already serves it, or else with the one whose namespace/name sorts
	// first.
	ErrClusterProfileDuplicateCluster = errors.New("cluster name given to more than one ClusterProfile")
)

// clusterProfileGVK is the ClusterProfile kind this watcher reads.
var clusterProfileGVK = schema.GroupVersionKind{Group: "multicluster.x-k8s.io", Version: "v1alpha1", Kind: "ClusterProfile"}

// ClusterProfileWatcher is a ConfigWatcher over the clusters of a Cluster
// Inventory (KEP-4322): every ClusterProfile (multicluster.x-k8s.io/v1alpha1)
// on the host cluster whose control plane its cluster manager reports
// healthy is a cluster of the fleet, named "<namespace>/<name>" after it
// unless ClusterProfileOptions.Name says otherwise. Its config's
// Source.Object is "ClusterProfile <namespace>/<name>", and its Properties
// are the profile's status.properties (among them, when listed,
// ClusterIDProperty and ClusterSetProperty).
//
// Credentials come by the access-provider protocol of the Cluster
// Inventory API (KEP-5339): the operator lists exec credential plugins in
// an access-providers file (see AccessProvider), and a profile lists in
// status.accessProviders (or the deprecated status.credentialProviders)
// the providers that can reach its cluster, each with the cluster's
// kubeconfig entry. The watcher takes the first of the operator's
// providers that the profile lists, and builds the config from that
// entry's server, certificate-authority-data, tls-server-name, proxy-url
// and disable-compression, with the operator's exec plugin. The entry's
// ClusterExecExtension reaches the plugin as its cluster config
// (spec.cluster.config in KUBERNETES_EXEC_INFO, with provideClusterInfo).
// client-go runs the plugin when it needs credentials, and again once they
// expire or are refused, so that rotated credentials are picked up
// without restarting anything.
//
// Because the command always comes from the operator, never from a
// profile, plugins run without any opt-in such as AllowAuthPlugins. A
// profile is untrusted input in every other way: it chooses no file (a
// certificate-authority path is refused), may not turn TLS verification
// off, and adds arguments or environment variables to the plugin only
// where the operator's provider allows it — and never loader, shell,
// interpreter, proxy, TLS-trust or credential variables, nor one the
// controller's process already has (see AccessProvider).
//
// Readiness and removal: a profile joins the fleet (Added) once its
// ControlPlaneHealthy condition is True, or with PublishUnhealthy as soon
// as it lists an access provider; until then it is waited for, not
// reported. From then on it stays until the profile is deleted
// (or leaves the watched namespaces or the selector): a control plane
// that is briefly unhealthy, during an upgrade or while its cluster
// manager loses touch, should not stop and restart every controller of
// the cluster, and the Server's own status of the member tells whether
// it is reachable. Its config still follows every change meanwhile. A
// watcher started while a profile is unhealthy waits for it to be
// healthy.
//
// The watcher reads the profiles through a controller-runtime cache (no
// polling) and, on every change, works out the whole fleet again and
// publishes only the difference: a new endpoint, CA, provider or property
// is one Updated event (a change of properties alone is one the Server
// applies without restarting the member), a change that alters nothing
// (a condition's timestamp, say) is none.
//
// Problems — no provider the operator knows, no server or one that is no
// URL, a CA that does not load, two profiles given one cluster name — are
// reported on Errors naming the profile ("ClusterProfile ns/name"), once
// per problem until it changes or goes away; they never quote
// certificates or credentials. A cluster already published keeps its
// last good config while its profile is broken; the other clusters are
// not affected. When the host does not serve the ClusterProfile CRD, the
// watcher reports ErrClusterProfileNotInstalled and tries again with a
// backoff (1s doubling to 30s) until it is installed.
//
// The identity the watcher runs as needs list and watch on
// clusterprofiles.multicluster.x-k8s.io, cluster-wide unless Namespaces
// restricts it. Whoever may write a profile's status chooses the server
// the operator's plugins are asked to give credentials for, so that right
// belongs to cluster managers only.
type ClusterProfileWatcher struct {
	hostCache
	opts ClusterProfileOptions

	// The fields below belong to the run goroutine.

	// claimed holds which profile serves each cluster and the problems
	// reported; names maps a profile to the cluster name it last claimed,
	// so that a profile whose status breaks still keeps its cluster.
	claimed claimsState
	names   map[string]string
}

var _ ConfigWatcher = (*ClusterProfileWatcher)(nil)

// NewClusterProfileWatcher watches the ClusterProfiles on the host cluster
// that hostCfg reaches. The operator's access providers must be given
// (WithAccessProvidersFile or WithAccessProviders); a providers file that
// does not load is an error naming it (ErrAccessProvidersInvalid). Like
// NewKubeFedWatcher, it does not wait for the host: it returns at once,
// and the watcher publishes the clusters it finds as Added, then every
// change. Call Stop to end it.
func NewClusterProfileWatcher(hostCfg *rest.Config, opts ...ClusterProfileOption) (*ClusterProfileWatcher, error) {
	o, err := newClusterProfileOptions(opts)
	if err != nil {
		return nil, err
	}
	log := o.Logger.WithValues("namespaces", o.Namespaces)
	var namespaces map[string]cache.Config
	if len(o.Namespaces) > 0 {
		namespaces = make(map[string]cache.Config, len(o.Namespaces))
		for _, ns := range o.Namespaces {
			namespaces[ns] = cache.Config{}
		}
	} else {
		log = o.Logger.WithValues("namespaces", "*")
	}
	w := &ClusterProfileWatcher{opts: o, claimed: newClaimsState(), names: map[string]string{}}
	if err := w.init(hostCfg, hostCacheSpec{
		what:       "ClusterProfile",
		quoteHost:  config.RedactURL,
		log:        log,
		namespaces: namespaces,
		selector:   o.Selector,
		transform:  clusterProfileTransform,
		watched:    []hostWatched{{kind: "ClusterProfiles", obj: newClusterProfileObject()}},
		noMatch:    ErrClusterProfileNotInstalled,
		watching:   "watching ClusterProfiles",
		sync:       w.sync,
	}); err != nil {
		return nil, err
	}
	w.start()
	return w, nil
}

func newClusterProfileObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(clusterProfileGVK)
	return u
}

// sync works out the fleet from the cache and publishes it. It returns
// false once the watcher is stopped; it never asks to be called again
// without a change.
func (w *ClusterProfileWatcher) sync() (time.Time, bool) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(clusterProfileGVK.GroupVersion().WithKind(clusterProfileGVK.Kind + "List"))
	if listed, running := w.list("ClusterProfiles", list); !listed {
		return time.Time{}, running
	}
	serving := make(map[string]bool, len(w.claimed.owners))
	for _, ref := range w.claimed.owners {
		serving[ref] = true
	}
	claims := make([]*claim, 0, len(list.Items))
	for i := range list.Items {
		u := &list.Items[i]
		ref := u.GetNamespace() + "/" + u.GetName()
		if c := claimSafely(w.log, "ClusterProfile", ref, ref, w.names[ref], func() *claim { return w.claim(u, serving) }); c != nil {
			claims = append(claims, c)
		}
	}
	if !w.claimed.publish(&w.hostCache, claims, func(c, owner *claim) error {
		return fmt.Errorf("configwatcher: ClusterProfile %s: cluster %s: %w (ClusterProfile %s keeps it)", c.ref, config.QuoteName(c.name), ErrClusterProfileDuplicateCluster, owner.ref)
	}) {
		return time.Time{}, false
	}
	clear(w.names)
	for _, c := range claims {
		if c.name != "" {
			w.names[c.ref] = c.name
		}
	}
	return time.Time{}, true
}

// claim reads one profile: nil while it serves no cluster yet and waits
// for its cluster manager (to list access providers, to report it
// healthy), or when the naming function leaves it out; else the cluster
// it claims.
func (w *ClusterProfileWatcher) claim(u *unstructured.Unstructured, serving map[string]bool) *claim {
	cp, err := readClusterProfile(u)
	c := &claim{ref: cp.ref, id: cp.ref}
	fail := func(err error) *claim {
		c.err = fmt.Errorf("configwatcher: ClusterProfile %s: %w", cp.ref, err)
		return c
	}
	switch {
	case err != nil:
		c.name = w.names[cp.ref] // a profile whose status breaks keeps its cluster
		return fail(err)
	case !serving[cp.ref] && (!cp.offersAccess() || !w.opts.PublishUnhealthy && !cp.healthy()):
		return nil
	}
	if c.name = w.opts.Name(cp.ident); c.name == "" {
		return nil
	}
	p, pa, err := cp.access(w.opts.Providers)
	if err != nil {
		return fail(err)
	}
	cfg, err := restConfig(p, pa)
	if err != nil {
		return fail(err)
	}
	c.cfg = &config.NamedConfig{
		Name:       c.name,
		Config:     cfg,
		Source:     config.Source{Object: "ClusterProfile " + cp.ref},
		Properties: maps.Clone(cp.ident.Properties),
	}
	return c
}

// clusterProfileTransform trims profiles before they enter the cache:
// managed fields and annotations (a last-applied configuration, say) are
// never read.
func clusterProfileTransform(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
		m.SetAnnotations(nil)
	}
	return obj, nil
}
