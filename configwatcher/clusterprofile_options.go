package configwatcher

import (
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/mccr-dev/mccr/apis/clusterinventory"
)

// Well-known ClusterProfile properties (KEP-2149's ClusterProperty names),
// found in NamedConfig.Properties when the profile lists them.
const (
	// ClusterIDProperty is the cluster's ID, unique in its ClusterSet.
	ClusterIDProperty = "cluster.clusterset.k8s.io"
	// ClusterSetProperty names the ClusterSet the cluster belongs to.
	ClusterSetProperty = "clusterset.k8s.io"
)

// ClusterProfileProperty is set by the watcher, not by a profile: the
// namespace/name of the ClusterProfile serving the member, which changes
// when another profile of the same member takes over (see
// ClusterProfileWatcher).
const ClusterProfileProperty = "mccr.dev/clusterprofile"

// ClusterProfileIdentity is what a ClusterProfileNameFunc names a cluster
// after: the profile's namespace, name and labels, its member ID, and its
// properties.
type ClusterProfileIdentity struct {
	Namespace, Name string
	Labels          map[string]string
	// MemberID is the profile's inventory member ID (the value of its
	// label multicluster.x-k8s.io/inventory-member-id), "" without one.
	// Profiles with the same MemberID stand for one cluster: the watcher
	// makes them one member of the fleet (see ClusterProfileWatcher), so a
	// naming function should give them one name, as those of this package
	// do by naming such a member after its MemberID.
	MemberID string
	// Properties are the profile's status.properties, by name.
	Properties map[string]string
}

// ClusterProfileNameFunc names the cluster a ClusterProfile describes. An
// empty name leaves the profile out of the fleet.
type ClusterProfileNameFunc func(ClusterProfileIdentity) string

// DefaultClusterProfileName names a cluster after its profile's member ID
// when it has one, the name every profile of that member shares (a label
// value, which holds no '/'), and else "<namespace>/<name>": unique on the
// host whatever the namespaces watched, and what the Cluster API watcher
// does. The default.
func DefaultClusterProfileName(p ClusterProfileIdentity) string {
	if p.MemberID != "" {
		return p.MemberID
	}
	return p.Namespace + "/" + p.Name
}

// ClusterProfileObjectName names a cluster after its profile's member ID
// when it has one, and else after the profile's name alone, for a fleet
// whose profiles all live in one namespace (a ClusterSet's).
func ClusterProfileObjectName(p ClusterProfileIdentity) string {
	if p.MemberID != "" {
		return p.MemberID
	}
	return p.Name
}

// ClusterProfileClusterID names a cluster by its ClusterIDProperty, the ID
// that KEP-2149 makes unique within a ClusterSet; a profile without it is
// left out. A change of the ID renames the cluster (Deleted, then Added).
func ClusterProfileClusterID(p ClusterProfileIdentity) string { return p.Properties[ClusterIDProperty] }

// ClusterProfileOptions configures a ClusterProfileWatcher. The zero value
// needs only access providers; NewClusterProfileWatcher applies the
// defaults.
type ClusterProfileOptions struct {
	// ProvidersFile is the operator's access-providers file (see
	// AccessProvider), read once by NewClusterProfileWatcher. Its
	// providers come before Providers.
	ProvidersFile string

	// Providers are access providers given in code, used after those of
	// ProvidersFile. Together they must name at least one provider.
	// Their order is the operator's preference: a profile is reached
	// through the first of them it lists.
	Providers []AccessProvider

	// Namespaces restricts the watch to these namespaces. Defaults to
	// every namespace: ClusterProfiles live in the namespace of their
	// ClusterSet, and one inventory may hold several. The identity the
	// watcher runs as then needs list and watch on clusterprofiles
	// cluster-wide.
	Namespaces []string

	// Selector, if set, restricts the watch to the profiles whose labels
	// it matches: those of one cluster manager, say
	// (x-k8s.io/cluster-manager=<name>).
	Selector labels.Selector

	// Name names the cluster of a profile. Defaults to
	// DefaultClusterProfileName.
	Name ClusterProfileNameFunc

	// PublishUnhealthy publishes every profile with a usable access
	// provider, whether or not its ControlPlaneHealthy condition is True.
	// Off by default: a cluster joins once its cluster manager reports it
	// healthy. A profile whose Joined condition is False stays out either
	// way.
	PublishUnhealthy bool

	// Version is the ClusterProfile version read: "v1alpha2" or
	// "v1alpha1". By default the watcher reads the newest the host
	// serves, v1alpha2 where served. An API server serving both leaves
	// v1alpha1's deprecated status.credentialProviders out of what it
	// serves as v1alpha2, so an inventory whose cluster managers still
	// write only that field is read as "v1alpha1". A host that does not
	// serve the version is reported as ErrClusterProfileNotInstalled.
	Version string

	// Logger receives the watcher's errors and, at V(1), every event.
	// Defaults to a logger that discards. Set it with WithLogger.
	Logger logr.Logger
}

// ClusterProfileOption sets ClusterProfileOptions fields. Besides the
// options below, NewClusterProfileWatcher takes WithLogger (see
// LoggerOption). AllowAuthPlugins does not compile here: the plugins run
// are the operator's access providers, never a profile's choice.
type ClusterProfileOption interface {
	applyToClusterProfile(*ClusterProfileOptions) error
}

type clusterProfileOptionFunc func(*ClusterProfileOptions)

func (f clusterProfileOptionFunc) applyToClusterProfile(o *ClusterProfileOptions) error {
	f(o)
	return nil
}

// WithAccessProvidersFile sets ClusterProfileOptions.ProvidersFile.
func WithAccessProvidersFile(path string) ClusterProfileOption {
	return clusterProfileOptionFunc(func(o *ClusterProfileOptions) { o.ProvidersFile = path })
}

// WithAccessProviders adds to ClusterProfileOptions.Providers.
func WithAccessProviders(providers ...AccessProvider) ClusterProfileOption {
	return clusterProfileOptionFunc(func(o *ClusterProfileOptions) { o.Providers = append(o.Providers, providers...) })
}

// WithClusterProfileNamespaces sets ClusterProfileOptions.Namespaces.
func WithClusterProfileNamespaces(namespaces ...string) ClusterProfileOption {
	return clusterProfileOptionFunc(func(o *ClusterProfileOptions) { o.Namespaces = slices.Clone(namespaces) })
}

// WithClusterProfileSelector sets ClusterProfileOptions.Selector.
func WithClusterProfileSelector(s labels.Selector) ClusterProfileOption {
	return clusterProfileOptionFunc(func(o *ClusterProfileOptions) { o.Selector = s })
}

// WithClusterProfileName sets ClusterProfileOptions.Name.
func WithClusterProfileName(f ClusterProfileNameFunc) ClusterProfileOption {
	return clusterProfileOptionFunc(func(o *ClusterProfileOptions) { o.Name = f })
}

// PublishUnhealthy sets ClusterProfileOptions.PublishUnhealthy.
func PublishUnhealthy() ClusterProfileOption {
	return clusterProfileOptionFunc(func(o *ClusterProfileOptions) { o.PublishUnhealthy = true })
}

// WithClusterProfileVersion sets ClusterProfileOptions.Version.
func WithClusterProfileVersion(version string) ClusterProfileOption {
	return clusterProfileOptionFunc(func(o *ClusterProfileOptions) { o.Version = version })
}

func (o *ClusterProfileOptions) applyDefaults() {
	if o.Name == nil {
		o.Name = DefaultClusterProfileName
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
}

// newClusterProfileOptions applies opts in order over the zero value,
// reads the providers file, checks the providers, then applies the
// defaults.
func newClusterProfileOptions(opts []ClusterProfileOption) (ClusterProfileOptions, error) {
	o := ClusterProfileOptions{}
	if err := applyOptions(&o, opts, ClusterProfileOption.applyToClusterProfile); err != nil {
		return o, err
	}
	if o.ProvidersFile != "" {
		fromFile, err := LoadAccessProviders(o.ProvidersFile)
		if err != nil {
			return o, err
		}
		o.Providers = append(fromFile, o.Providers...)
	}
	if len(o.Providers) == 0 {
		return o, fmt.Errorf("configwatcher: NewClusterProfileWatcher: %w: none given (WithAccessProvidersFile or WithAccessProviders)", ErrAccessProvidersInvalid)
	}
	if err := checkAccessProviders(o.Providers); err != nil {
		return o, fmt.Errorf("configwatcher: NewClusterProfileWatcher: %w: %w", ErrAccessProvidersInvalid, err)
	}
	if slices.Contains(o.Namespaces, "") {
		return o, fmt.Errorf("configwatcher: NewClusterProfileWatcher: an empty namespace among %q", o.Namespaces)
	}
	if o.Version != "" && !slices.Contains(clusterinventory.Versions, o.Version) {
		return o, fmt.Errorf("configwatcher: NewClusterProfileWatcher: version %q is none of %q", o.Version, clusterinventory.Versions)
	}
	o.applyDefaults()
	return o, nil
}
