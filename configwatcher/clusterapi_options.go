package configwatcher

import (
	"fmt"
	"slices"

	"github.com/go-logr/logr"
)

// DefaultClusterAPIName names the cluster of a Cluster API Cluster
// "<namespace>/<name>", unique across the management cluster. It is
// ClusterAPIOptions.Name unless set.
func DefaultClusterAPIName(namespace, name string) string {
	return namespace + "/" + name
}

// ClusterAPIOptions configures a ClusterAPIWatcher. The zero value is
// usable; NewClusterAPIWatcher applies the defaults.
type ClusterAPIOptions struct {
	// Namespaces restricts the watcher to the Clusters, and their kubeconfig
	// Secrets, in these namespaces. By default every namespace is watched,
	// as Cluster API itself does: management clusters commonly keep one
	// namespace per team or tenant. Secrets are read through a cache
	// restricted to Cluster API's label (cluster.x-k8s.io/cluster-name)
	// either way, but without Namespaces the watcher's identity needs list
	// and watch on Secrets cluster-wide; set Namespaces to grant it less.
	Namespaces []string

	// Name names the cluster of the Cluster namespace/name. Defaults to
	// DefaultClusterAPIName. The names must be unique: two Clusters given
	// the same name are an error (ErrClusterAPIDuplicateName), and the
	// name stays with the Cluster already serving it. An empty name
	// leaves the Cluster out of the fleet. The function must be a pure
	// function of its arguments: it is called on every change.
	Name func(namespace, name string) string

	// RequireAvailable publishes a Cluster only once its Available
	// condition is True, rather than once its control plane is
	// initialized (the default). v1beta2 Clusters carry it in
	// status.conditions, v1beta1 Clusters of Cluster API v1.9 and v1.10 in
	// status.v1beta2.conditions; a v1beta1 Cluster without those (Cluster
	// API before v1.9) counts as Available when its v1beta1 Ready condition
	// is True.
	RequireAvailable bool

	// DeleteOnDeletionStart deletes a cluster from the fleet as soon as its
	// Cluster's deletion starts (metadata.deletionTimestamp is set),
	// rather than once the Cluster is gone (the default). By default the
	// controllers keep working in a cluster being deleted, which is what
	// lets them clean up after themselves there (their finalizers, say).
	DeleteOnDeletionStart bool

	// AllowAuthPlugins accepts kubeconfigs whose user runs a program (exec
	// or auth-provider entries), as some providers' kubeconfigs do (EKS's
	// aws-iam-authenticator, say). Off by default: whoever can write a
	// kubeconfig Secret could otherwise run programs in the controller's
	// process. File references stay refused whatever the options. Set it
	// with AllowAuthPlugins.
	AllowAuthPlugins bool

	// Logger receives the watcher's errors and, at V(1), every event.
	// Defaults to a logger that discards. Set it with WithLogger.
	Logger logr.Logger
}

// ClusterAPIOption sets ClusterAPIOptions fields. Besides the options
// below, NewClusterAPIWatcher takes WithLogger and AllowAuthPlugins (see
// LoggerOption and AuthPluginsOption); the FileWatcher's own options do
// not compile here.
type ClusterAPIOption interface {
	applyToClusterAPI(*ClusterAPIOptions) error
}

type clusterAPIOptionFunc func(*ClusterAPIOptions)

func (f clusterAPIOptionFunc) applyToClusterAPI(o *ClusterAPIOptions) error {
	f(o)
	return nil
}

// WithClusterAPINamespaces sets ClusterAPIOptions.Namespaces; given more
// than once, the namespaces add up.
func WithClusterAPINamespaces(namespaces ...string) ClusterAPIOption {
	return clusterAPIOptionFunc(func(o *ClusterAPIOptions) { o.Namespaces = append(o.Namespaces, namespaces...) })
}

// WithClusterAPIName sets ClusterAPIOptions.Name.
func WithClusterAPIName(name func(namespace, name string) string) ClusterAPIOption {
	return clusterAPIOptionFunc(func(o *ClusterAPIOptions) { o.Name = name })
}

// RequireAvailable sets ClusterAPIOptions.RequireAvailable.
func RequireAvailable() ClusterAPIOption {
	return clusterAPIOptionFunc(func(o *ClusterAPIOptions) { o.RequireAvailable = true })
}

// DeleteOnDeletionStart sets ClusterAPIOptions.DeleteOnDeletionStart.
func DeleteOnDeletionStart() ClusterAPIOption {
	return clusterAPIOptionFunc(func(o *ClusterAPIOptions) { o.DeleteOnDeletionStart = true })
}

func (o *ClusterAPIOptions) applyDefaults() {
	slices.Sort(o.Namespaces)
	o.Namespaces = slices.Compact(o.Namespaces)
	if o.Name == nil {
		o.Name = DefaultClusterAPIName
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
}

// newClusterAPIOptions applies opts in order over the zero value, then the
// defaults.
func newClusterAPIOptions(opts []ClusterAPIOption) (ClusterAPIOptions, error) {
	o := ClusterAPIOptions{}
	if err := applyOptions(&o, opts, ClusterAPIOption.applyToClusterAPI); err != nil {
		return o, err
	}
	if slices.Contains(o.Namespaces, "") {
		return o, fmt.Errorf("configwatcher: NewClusterAPIWatcher: an empty namespace in %q (leave Namespaces empty to watch them all)", o.Namespaces)
	}
	o.applyDefaults()
	return o, nil
}
