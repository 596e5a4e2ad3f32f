package configwatcher

import (
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/mccr-dev/mccr/config"
)

var (
	// ErrClusterAPINotInstalled means the host cluster does not serve Cluster
	// API's Cluster CRD (clusters.cluster.x-k8s.io) in a version the
	// watcher reads (v1beta2 or v1beta1).
	ErrClusterAPINotInstalled = errors.New("the Cluster API Cluster CRD (clusters.cluster.x-k8s.io, v1beta2 or v1beta1) is not installed")

	// ErrClusterAPISecretNotFound means the kubeconfig Secret of an
	// initialized Cluster (<cluster>-kubeconfig, in its namespace) is not
	// there, or lacks Cluster API's cluster.x-k8s.io/cluster-name label,
	// without which the watcher does not see it.
	ErrClusterAPISecretNotFound = errors.New("kubeconfig Secret not found (or not labelled " + ClusterAPIClusterNameLabel + ")")

	// ErrClusterAPIDuplicateName means ClusterAPIOptions.Name gives two
	// Clusters the same cluster name. The name stays with the Cluster that
	// already serves it, or else with the one whose namespace/name sorts
	// first.
	ErrClusterAPIDuplicateName = errors.New("cluster name given to more than one Cluster")
)

// ClusterAPIClusterNameLabel is the label Cluster API puts on the Secrets
// of a Cluster, its kubeconfig Secret among them, with the Cluster's name as
// value. A ClusterAPIWatcher reads only the Secrets that carry it.
const ClusterAPIClusterNameLabel = "cluster.x-k8s.io/cluster-name"

// ClusterAPIWatcher is a ConfigWatcher over the workload clusters a Cluster
// API management cluster (the host) manages: every Cluster object
// (clusters.cluster.x-k8s.io) whose control plane is initialized is a
// cluster of the fleet, reached with the kubeconfig Cluster API writes for
// it: the "value" key of the Secret <cluster>-kubeconfig in the Cluster's
// namespace. The cluster is named "<namespace>/<name>" (see
// ClusterAPIOptions.Name), its config's Source.Object is
// "Cluster <namespace>/<name>", and its Properties are the Cluster's labels,
// each as LabelPropertyPrefix+key ("label:topology.kubernetes.io/region"):
// a label's value longer than 4 KiB or not UTF-8 is left out, and so is
// every label past the first 128 in key order. A change of labels alone is
// an Updated event the Server applies without restarting the member.
//
// Versions: the watcher reads v1beta2 Clusters (Cluster API v1.11 and
// later) and, from management clusters that serve only that, v1beta1. It
// asks the host's discovery which it serves when it starts watching, and
// prefers v1beta2; it needs no Cluster API Go module. The version is not
// asked again: after an upgrade that stops serving it, restart the watcher.
//
// When a Cluster joins the fleet (Added):
//
//   - v1beta2: status.initialization.controlPlaneInitialized is true, or
//     the ControlPlaneInitialized condition is True;
//   - v1beta1: status.controlPlaneReady is true (Cluster API sets it once,
//     when the control plane is initialized), or the ControlPlaneInitialized
//     condition (in status.conditions, or status.v1beta2.conditions) is
//     True;
//   - with RequireAvailable, once the Available condition is True instead.
//
// A Cluster that loses readiness after it was published (Available going
// False, say) stays in the fleet with its config: mccr checks every
// cluster's health itself, and a cluster that is briefly unavailable should
// not lose its controllers. Readiness only gates the first publication by
// this watcher; a watcher started later waits for it again.
//
// Changes: the kubeconfig Secret itself is watched, so a rotated kubeconfig
// (a new client certificate, a new token) is one Updated event with the new
// config; a change that leaves the config as it was is none. A cluster is
// Deleted when its Cluster is gone, or with DeleteOnDeletionStart as soon
// as the Cluster's deletion starts. A Cluster deleted and created again
// under the same name is another cluster: it waits to be initialized again.
//
// Problems — an initialized Cluster whose Secret is missing or has no
// "value" key, a kubeconfig that does not parse, credentials refused, two
// Clusters given one name — are reported on Errors naming the Cluster and,
// where it is about the Secret, the Secret, as namespace/name, once per
// problem until it changes or goes away. They never quote the Secret's
// content. A cluster already published keeps its last good config while
// its Secret is broken, and the other clusters are not affected. While a
// Cluster is being deleted, its Secret going first is expected: the cluster
// keeps its last config, and no error is reported.
//
// A kubeconfig Secret is untrusted input, read by the rules of
// SecretWatcher: its credentials must be inline (a kubeconfig naming a
// token, certificate or key file is refused with
// config.ErrFileReferenceRefused), and credentials that run programs are
// refused (config.ErrAuthPluginRefused) unless AllowAuthPlugins is given.
// Cluster API's own kubeconfigs hold a client certificate inline; some
// providers' (EKS's) run a program.
//
// When the host does not serve the Cluster CRD, NewClusterAPIWatcher still
// returns at once; the watcher reports ErrClusterAPINotInstalled on Errors
// (again at most once a minute) and tries again every few seconds (2s at
// most apart, one discovery request each) until the CRD is installed, then
// publishes the clusters, within seconds of the install; no right on
// CustomResourceDefinitions is needed. Other failures of the host's
// watches are reported too, the same message at most once a minute, while
// the cache keeps retrying.
//
// The watcher reads through a controller-runtime cache (no polling): the
// Clusters, trimmed to their metadata and the status fields above, and the
// Secrets labelled cluster.x-k8s.io/cluster-name, of which only the "value"
// of kubeconfig Secrets is kept (Cluster API's CA and service account keys
// carry the label too, and are dropped as they arrive). The identity the
// watcher runs as needs get, list and watch on clusters.cluster.x-k8s.io
// (get tells a Cluster being deleted from one that stays, when its Secret
// is gone first), and list and watch on secrets, in the namespaces of
// ClusterAPIOptions.Namespaces, or cluster-wide without.
type ClusterAPIWatcher struct {
	hostCache
	opts ClusterAPIOptions

	// The fields below belong to the run goroutine.

	// version is the Cluster version watched, once resolveCluster has
	// chosen it.
	version string
	// claimed holds which Cluster (by UID) serves each cluster, and the
	// problems reported.
	claimed claimsState
}

var _ ConfigWatcher = (*ClusterAPIWatcher)(nil)

// NewClusterAPIWatcher watches the Cluster API Clusters on the management
// cluster that hostCfg reaches (see ClusterAPIOptions for the defaults).
// Like NewKubeFedWatcher, it returns at once without waiting for the host;
// the watcher publishes the initialized Clusters it finds as Added, then
// every change. Call Stop to end it.
func NewClusterAPIWatcher(hostCfg *rest.Config, opts ...ClusterAPIOption) (*ClusterAPIWatcher, error) {
	o, err := newClusterAPIOptions(opts)
	if err != nil {
		return nil, err
	}
	labelled, err := labels.NewRequirement(ClusterAPIClusterNameLabel, selection.Exists, nil)
	if err != nil {
		return nil, fmt.Errorf("configwatcher: NewClusterAPIWatcher: %w", err)
	}

	log := o.Logger
	var namespaces map[string]cache.Config
	if len(o.Namespaces) == 0 {
		log = log.WithValues("namespace", "*")
	} else {
		log = log.WithValues("namespace", strings.Join(o.Namespaces, ","))
		namespaces = make(map[string]cache.Config, len(o.Namespaces))
		for _, ns := range o.Namespaces {
			namespaces[ns] = cache.Config{}
		}
	}
	w := &ClusterAPIWatcher{opts: o, claimed: newClaimsState()}
	if err := w.init(hostCfg, hostCacheSpec{
		what:       "ClusterAPI",
		quoteHost:  config.RedactURL,
		log:        log,
		schemes:    []func(*runtime.Scheme) error{corev1.AddToScheme},
		namespaces: namespaces,
		transform:  clusterAPITransform,
		watched: []hostWatched{
			{kind: "Clusters", resolve: w.resolveCluster},
			{kind: "Secrets", obj: &corev1.Secret{}, selector: labels.NewSelector().Add(*labelled)},
		},
		noMatch:  ErrClusterAPINotInstalled,
		watching: "watching Cluster API Clusters",
		sync:     w.sync,
	}); err != nil {
		return nil, err
	}
	w.start()
	return w, nil
}

// sync works out the fleet from the cache and publishes it. It returns
// false once the watcher is stopped; it never asks to be called again
// without a change.
func (w *ClusterAPIWatcher) sync() (time.Time, bool) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(clusterAPIGroupVersion(w.version).WithKind("ClusterList"))
	if listed, running := w.list("Clusters", list); !listed {
		return time.Time{}, running
	}
	claims := make([]*claim, 0, len(list.Items))
	served := w.claimed.served()
	for i := range list.Items {
		u := &list.Items[i]
		ref := u.GetNamespace() + "/" + u.GetName()
		if c := claimSafely(w.log, "Cluster", ref, string(u.GetUID()), served[string(u.GetUID())], func() *claim { return w.claim(u) }); c != nil {
			claims = append(claims, c)
		}
	}
	return time.Time{}, w.claimed.publish(&w.hostCache, claims, func(c, owner *claim) error {
		return fmt.Errorf("configwatcher: Cluster %s: cluster name %s: %w (Cluster %s keeps it)", c.ref, config.QuoteName(c.name), ErrClusterAPIDuplicateName, owner.ref)
	})
}

// claim reads one Cluster and its kubeconfig Secret. It returns nil for a
// Cluster that claims no cluster (yet): one left out by the name function,
// one not ready that does not serve its cluster already, and, with
// DeleteOnDeletionStart, one being deleted.
func (w *ClusterAPIWatcher) claim(u *unstructured.Unstructured) *claim {
	ns, name := u.GetNamespace(), u.GetName()
	c := &claim{ref: ns + "/" + name, id: string(u.GetUID()), name: w.opts.Name(ns, name)}
	if c.name == "" {
		return nil
	}
	deleting := u.GetDeletionTimestamp() != nil
	if deleting && w.opts.DeleteOnDeletionStart {
		return nil
	}
	c.quiet = deleting
	cl, err := readClusterAPICluster(u)
	if err != nil {
		c.err = fmt.Errorf("configwatcher: Cluster %s: %w", c.ref, err)
		return c
	}
	if !cl.ready(w.version, w.opts.RequireAvailable) && w.claimed.owners[c.name] != c.id {
		return nil
	}

	secret := types.NamespacedName{Namespace: ns, Name: name + clusterAPIKubeconfigSuffix}
	fail := func(err error) *claim {
		c.err = fmt.Errorf("configwatcher: Cluster %s: kubeconfig Secret %s: %w", c.ref, secret, err)
		return c
	}
	var s corev1.Secret
	if err := w.cache.Get(w.ctx, secret, &s); err != nil {
		if apierrors.IsNotFound(err) {
			err = ErrClusterAPISecretNotFound
			// Deleted with its Cluster, whose deletion (or its start)
			// the cache has not seen yet: expected, as for a Cluster
			// the cache already sees being deleted.
			c.quiet = c.quiet || w.leaving(u)
		}
		return fail(err)
	}
	cfg, err := secretKubeconfig(s.Data, clusterAPIKubeconfigKey, w.opts.AllowAuthPlugins)
	if err != nil {
		return fail(err)
	}
	c.cfg = &config.NamedConfig{Name: c.name, Config: cfg, Source: config.Source{Object: "Cluster " + c.ref}, Properties: labelProperties(u.GetLabels())}
	return c
}
