package configwatcher

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/apis/clusterinventory"
	"github.com/mccr-dev/mccr/config"
)

var (
	// ErrClusterProfileNotInstalled means the host cluster does not serve
	// the ClusterProfile CRD (clusterprofiles.multicluster.x-k8s.io) in a
	// version the watcher reads (v1alpha2 or v1alpha1, or the one
	// ClusterProfileOptions.Version names). The watcher retries until it
	// is installed.
	ErrClusterProfileNotInstalled = errors.New("the ClusterProfile CRD (clusterprofiles.multicluster.x-k8s.io, v1alpha2 or v1alpha1) is not installed")

	// ErrClusterProfileNoAccessProvider means a ClusterProfile lists no
	// access provider that the operator's access providers know, so there
	// is no plugin to get credentials from.
	ErrClusterProfileNoAccessProvider = errors.New("no access provider the operator knows")

	// ErrClusterProfileInvalid means the access provider chosen for a
	// ClusterProfile cannot be turned into a config (no server or one that
	// is no https URL, a CA that is no PEM certificate, a file path, a bad
	// proxy URL or extension), or its status does not parse. A profile
	// asking to turn TLS verification off (insecure-skip-tls-verify) is
	// not refused: the flag is ignored, and the server's certificate
	// checked.
	ErrClusterProfileInvalid = errors.New("invalid ClusterProfile")

	// ErrClusterProfileDuplicateCluster means two ClusterProfiles of
	// different members are given the same cluster name. The cluster stays
	// with the profile that already serves it, or else with the one whose
	// namespace/name sorts first. (Profiles of one member, sharing an
	// inventory member ID, are no duplicates: see ClusterProfileWatcher.)
	ErrClusterProfileDuplicateCluster = errors.New("cluster name given to more than one ClusterProfile")
)

// ClusterProfileWatcher is a ConfigWatcher over the clusters of a Cluster
// Inventory (KEP-4322): every ClusterProfile (multicluster.x-k8s.io) on the
// host cluster whose control plane its cluster manager reports healthy is
// a cluster of the fleet, named after its inventory member ID or else
// "<namespace>/<name>" (see DefaultClusterProfileName), unless
// ClusterProfileOptions.Name says otherwise. Its config's Source.Object is
// "ClusterProfile <namespace>/<name>", and its Properties are the
// profile's status.properties (among them, when listed, ClusterIDProperty
// and ClusterSetProperty), its labels, each as LabelPropertyPrefix+key
// ("label:x-k8s.io/cluster-manager"), and ClusterProfileProperty, the
// profile's namespace/name. A property's or label's value longer than
// 4 KiB or not UTF-8 is left out, and so is every label past the first
// 128 in key order, and every status property past the first 128:
// ClusterIDProperty and ClusterSetProperty first, then the others in key
// order.
//
// Versions: the watcher reads v1alpha2 where the host serves it (the
// Cluster Inventory API from v0.2), and v1alpha1 from hosts that serve only
// that; ClusterProfileOptions.Version pins one. It asks the host's
// discovery when it starts watching, and keeps the version it chose: a CRD
// upgraded meanwhile to serve v1alpha2 as well goes on being read as
// v1alpha1 until the watcher is restarted.
//
// Credentials come by the access-provider protocol of the Cluster
// Inventory API (KEP-5339): the operator lists exec credential plugins in
// an access-providers file (see AccessProvider), and a profile lists in
// status.accessProviders (or v1alpha1's deprecated
// status.credentialProviders) the providers that can reach its cluster,
// each with the cluster's kubeconfig entry. The watcher takes the first of
// the operator's providers that the profile lists, and builds the config
// from that entry's server, certificate-authority-data, tls-server-name,
// proxy-url and disable-compression, with the operator's exec plugin. The
// entry's ClusterExecExtension reaches the plugin as its cluster config
// (spec.cluster.config in KUBERNETES_EXEC_INFO, with provideClusterInfo).
// client-go runs the plugin when it needs credentials, and again once they
// expire or are refused, so that rotated credentials are picked up
// without restarting anything.
//
// Because the command always comes from the operator, never from a
// profile, plugins run without any opt-in such as AllowAuthPlugins. A
// profile is untrusted input in every other way: it chooses no file (a
// certificate-authority path is refused), cannot turn TLS off (a server
// that is not https is refused; insecure-skip-tls-verify is ignored and
// the server's certificate checked, as the Cluster Inventory API's own
// config builder does), and adds arguments or environment variables to the
// plugin only where the operator's provider allows it — and never loader,
// shell, interpreter, proxy, TLS-trust or credential variables, nor one
// the controller's process already has, unless the provider's
// AllowedProfileEnvVars names that variable (see AccessProvider).
//
// Readiness and removal: a profile joins the fleet (Added) once its
// ControlPlaneHealthy condition is True, or with PublishUnhealthy as soon
// as it lists an access provider; until then it is waited for, not
// reported. From then on it stays until the profile is deleted
// (or leaves the watched namespaces or the selector), or its Joined
// condition turns False: a control plane that is briefly unhealthy,
// during an upgrade or while its cluster manager loses touch, should not
// stop and restart every controller of the cluster, and the Server's own
// status of the member tells whether it is reachable. Its config still
// follows every change meanwhile. A watcher started while a profile is
// unhealthy waits for it to be healthy.
//
// Deletion: a profile leaves once it is gone. One whose deletion has
// started but waits on finalizers (deletionTimestamp set) keeps its
// cluster meanwhile, following its changes, as a Cluster API Cluster and
// an Argo CD cluster Secret do by default. The Cluster Inventory API gives
// the start of a deletion no meaning of its own: its sign that a cluster
// is leaving is Joined turning False (below); and a finalizer may be a
// consumer's cleanup, which needs to reach the cluster until it is done.
//
// Joined: a profile whose Joined condition is False never joins, and one
// that has joined leaves (Deleted) when it turns False, whatever
// PublishUnhealthy says: its cluster manager is telling that the cluster
// has left its inventory or is leaving it, and its access may go away at
// any moment. A profile without the condition (cluster managers that
// predate it do not set it), or with Unknown, is read as before.
//
// Members with several profiles: ClusterProfiles carrying the same
// inventory member ID (the label multicluster.x-k8s.io/inventory-member-id,
// KEP-4322) describe one cluster — written by two cluster managers, say,
// in two namespaces — and are one member of the fleet, not two. One of
// them serves it, with its access and its properties:
//
//  1. a profile whose access builds a config, over one whose does not;
//  2. then one whose ControlPlaneHealthy is True;
//  3. then one whose Joined is True (over one without the condition);
//  4. then the profile already serving the member, so that one that only
//     ranks as high as it does not take the member over, and a flapping
//     condition elsewhere restarts nothing;
//  5. then the oldest (creationTimestamp), which is the same answer on
//     every replica and after every restart;
//  6. then namespace/name.
//
// When the serving profile goes, or ranks below another, the next one
// takes over without the member leaving: one Updated event, which the
// Server applies without restarting the member when only the properties
// differ (ClusterProfileProperty always does), and with a restart when the
// access differs. The member leaves only
// with its last profile. Its name is what the naming function gives the
// serving profile: the member ID with the functions of this package, so
// that a handover keeps the name; a function giving a member's profiles
// different names renames it on a handover (Deleted, then Added).
//
// The watcher reads the profiles through a controller-runtime cache (no
// polling) and, on every change, works out the whole fleet again and
// publishes only the difference: a new endpoint, CA, provider, property or
// label is one Updated event (a change of properties or labels alone is
// one the Server applies without restarting the member), a change that
// alters nothing (a condition's timestamp, say) is none.
//
// Problems — no provider the operator knows, no server or one that is no
// URL, a CA that does not load, two members given one cluster name — are
// reported on Errors naming the profile ("ClusterProfile ns/name"), once
// per problem until it changes or goes away; they never quote
// certificates or credentials. A cluster already published keeps its
// last good config while its profile is broken; the other clusters are
// not affected. When the host does not serve the ClusterProfile CRD, the
// watcher reports ErrClusterProfileNotInstalled (again at most once a
// minute) and tries again every few seconds (hostRetryLimit, 2s) until it
// is installed, so that a CRD installed late is served within seconds;
// each try is one discovery request.
//
// The identity the watcher runs as needs list and watch on
// clusterprofiles.multicluster.x-k8s.io, cluster-wide unless Namespaces
// restricts it, and the discovery every client has; nothing on
// CustomResourceDefinitions. Whoever may write a profile's status chooses
// the server the operator's plugins are asked to give credentials for, so
// that right belongs to cluster managers only; whoever may write its
// labels chooses its member ID, and with it which member the profile
// stands for.
type ClusterProfileWatcher struct {
	hostCache
	opts ClusterProfileOptions

	// The fields below belong to the run goroutine.

	// version is the ClusterProfile version watched, once
	// resolveClusterProfile has chosen it.
	version string
	// claimed holds which profile serves each cluster and the problems
	// reported; names maps a profile to the cluster name it last claimed,
	// so that a profile whose status breaks still keeps its cluster.
	claimed claimsState
	names   map[string]string
	// serving maps the key of each member published (clusterProfile.member)
	// to the profile serving it; members maps each profile to the key of
	// the member it last stood for, which a profile whose status breaks
	// keeps.
	serving map[string]string
	members map[string]string
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
	w := &ClusterProfileWatcher{opts: o, claimed: newClaimsState(), names: map[string]string{},
		serving: map[string]string{}, members: map[string]string{}}
	if err := w.init(hostCfg, hostCacheSpec{
		what:       "ClusterProfile",
		quoteHost:  config.RedactURL,
		log:        log,
		namespaces: namespaces,
		selector:   o.Selector,
		transform:  clusterProfileTransform,
		watched:    []hostWatched{{kind: "ClusterProfiles", resolve: w.resolveClusterProfile}},
		noMatch:    ErrClusterProfileNotInstalled,
		watching:   "watching ClusterProfiles",
		sync:       w.sync,
	}); err != nil {
		return nil, err
	}
	w.start()
	return w, nil
}

// resolveClusterProfile chooses the ClusterProfile version to watch among
// those the host serves, and returns the object to watch it with.
func (w *ClusterProfileWatcher) resolveClusterProfile(m meta.RESTMapper) (client.Object, error) {
	mappings, err := m.RESTMappings(schema.GroupKind{Group: clusterinventory.Group, Kind: clusterinventory.Kind})
	if err != nil {
		return nil, err
	}
	served := make([]string, 0, len(mappings))
	for _, mp := range mappings {
		served = append(served, mp.GroupVersionKind.Version)
	}
	wanted := clusterinventory.Versions
	if w.opts.Version != "" {
		wanted = []string{w.opts.Version}
	}
	i := slices.IndexFunc(wanted, func(v string) bool { return slices.Contains(served, v) })
	if i < 0 {
		slices.Sort(served)
		return nil, fmt.Errorf("%w: the host serves ClusterProfile in %s only, the watcher reads %s",
			ErrClusterProfileNotInstalled, strings.Join(served, ", "), strings.Join(wanted, " or "))
	}
	w.version = wanted[i]
	w.log.Info("reading ClusterProfiles", "version", w.version)
	return newClusterProfileObject(w.version), nil
}

func newClusterProfileObject(version string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(clusterinventory.GroupVersionKind(version))
	return u
}

// sync works out the fleet from the cache and publishes it. It returns
// false once the watcher is stopped; it never asks to be called again
// without a change.
func (w *ClusterProfileWatcher) sync() (time.Time, bool) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(clusterinventory.GroupVersionKind(w.version).GroupVersion().WithKind(clusterinventory.Kind + "List"))
	if listed, running := w.list("ClusterProfiles", list); !listed {
		return time.Time{}, running
	}
	served := make(map[string]bool, len(w.serving))
	for member := range w.serving {
		served[member] = true
	}
	byMember := map[string][]*profileCandidate{}
	for i := range list.Items {
		u := &list.Items[i]
		ref := u.GetNamespace() + "/" + u.GetName()
		var pc *profileCandidate
		c := claimSafely(w.log, "ClusterProfile", ref, ref, w.names[ref], func() *claim {
			if pc = w.candidate(u, served); pc == nil {
				return nil
			}
			return pc.c
		})
		if c == nil {
			continue
		}
		if pc == nil || pc.c != c { // the profile panicked the watcher
			member := w.members[ref]
			if member == "" {
				member = ref
			}
			pc = &profileCandidate{c: c, member: member}
		}
		byMember[pc.member] = append(byMember[pc.member], pc)
	}
	claims := make([]*claim, 0, len(byMember))
	winners := make(map[string]*profileCandidate, len(byMember))
	for member, pcs := range byMember {
		win := pickServing(pcs, w.serving[member])
		winners[member] = win
		claims = append(claims, win.c)
		for _, pc := range pcs {
			// A standby profile claims nothing, but its problems are
			// still its own.
			if pc != win && pc.c.err != nil {
				claims = append(claims, &claim{ref: pc.c.ref, id: pc.c.id, err: pc.c.err, quiet: pc.c.quiet})
			}
		}
	}
	if !w.claimed.publish(&w.hostCache, claims, func(c, owner *claim) error {
		return fmt.Errorf("configwatcher: ClusterProfile %s: cluster %s: %w (ClusterProfile %s keeps it)", c.ref, config.QuoteName(c.name), ErrClusterProfileDuplicateCluster, owner.ref)
	}) {
		return time.Time{}, false
	}
	clear(w.names)
	clear(w.members)
	clear(w.serving)
	for member, pcs := range byMember {
		for _, pc := range pcs {
			w.members[pc.c.ref] = member
			if pc.c.name != "" {
				w.names[pc.c.ref] = pc.c.name
			}
		}
		if win := winners[member]; win.c.name != "" && w.claimed.owners[win.c.name] == win.c.id {
			w.serving[member] = win.c.ref
		}
	}
	return time.Time{}, true
}

// profileCandidate is a profile that may serve its member, and what ranks
// it against the member's other profiles.
type profileCandidate struct {
	c *claim
	// member is the key of the member the profile stands for
	// (clusterProfile.member).
	member          string
	healthy, joined bool
	created         time.Time
}

// pickServing picks the profile that serves a member among its candidates,
// by the order ClusterProfileWatcher tells; serving is the profile that
// served it so far ("" if none).
func pickServing(pcs []*profileCandidate, serving string) *profileCandidate {
	return slices.MinFunc(pcs, func(a, b *profileCandidate) int {
		rank := func(pc *profileCandidate) []bool {
			return []bool{pc.c.cfg != nil, pc.healthy, pc.joined, pc.c.ref == serving}
		}
		ra, rb := rank(a), rank(b)
		for i := range ra {
			if ra[i] != rb[i] {
				if ra[i] {
					return -1
				}
				return 1
			}
		}
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		return strings.Compare(a.c.ref, b.c.ref)
	})
}

// claim reads one profile: nil while it serves no cluster yet and waits
// for its cluster manager (to list access providers, to report it
// healthy), once its Joined condition is False, or when the naming
// function leaves it out; else the cluster it claims. served holds the
// keys of the members published (clusterProfile.member).
func (w *ClusterProfileWatcher) claim(u *unstructured.Unstructured, served map[string]bool) *claim {
	if pc := w.candidate(u, served); pc != nil {
		return pc.c
	}
	return nil
}

// candidate is claim, with what ranks the profile among its member's.
func (w *ClusterProfileWatcher) candidate(u *unstructured.Unstructured, served map[string]bool) *profileCandidate {
	cp, err := readClusterProfile(u)
	c := &claim{ref: cp.ref, id: cp.ref}
	pc := &profileCandidate{c: c, member: cp.member(), healthy: cp.healthy(), joined: cp.joined(), created: cp.created}
	fail := func(err error) *profileCandidate {
		c.err = fmt.Errorf("configwatcher: ClusterProfile %s: %w", cp.ref, err)
		return pc
	}
	switch {
	case err != nil:
		// A profile whose status breaks keeps its cluster, and its member.
		c.name = w.names[cp.ref]
		if m := w.members[cp.ref]; m != "" {
			pc.member = m
		}
		return fail(err)
	case cp.left():
		return nil
	}
	// A profile waits for its cluster manager (to list access providers,
	// to report the cluster healthy) unless its member is published
	// already; even then, one listing no access provider waits unless it
	// serves the member itself: a second cluster manager's new profile is
	// no problem of the member.
	member := served[pc.member]
	self := member && (w.serving[pc.member] == "" || w.serving[pc.member] == cp.ref)
	if !cp.offersAccess() && !self || !member && !w.opts.PublishUnhealthy && !cp.healthy() {
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
		Properties: cp.properties(),
	}
	return pc
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
