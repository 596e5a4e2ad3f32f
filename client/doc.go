// Package client is mccr's fan-out client: one controller-runtime
// client.Client for a whole fleet, which sends every call to the cluster
// named in the call's context.
//
// Server.GetClient returns it. A reconciler written for one cluster keeps
// its client.Client field and its code: the ctx mccr hands to Reconcile
// names the cluster the request came from, so
//
//	r.Get(ctx, req.NamespacedName, &pod)
//
// reads from that cluster's cache and nowhere else.
//
// # Routing
//
// Every method that takes a context reads the cluster name from it with
// known.ClusterFrom and delegates to that cluster's own client, the one its
// Manager built from the Server's options: Get and List read the member's
// informer cache (unstructured objects go to the API server unless the
// options cache them, as with a single Manager), writes go to its API
// server. Create, Update, Patch, Apply, Delete, DeleteAllOf, Status() and
// SubResource(name) (Get, Create, Update, Patch, Apply) all follow the
// same rule, and so does List when ctx names a cluster.
//
// To reach another cluster, derive a context:
//
//	other := known.WithCluster(ctx, "west")
//	err := r.Create(other, obj) // lands in west, whatever cluster ctx named
//
// Client.For(ctx) returns the named cluster's own client.Client, for code
// that wants to make several calls to one member or to use what only a
// member's client has (its RESTMapper, for kinds the host does not serve).
//
// # Errors
//
// A call that needs one cluster fails, without touching any cluster, with
// an error for which errors.Is reports:
//
//   - ErrNoClusterInContext: ctx names no cluster (a context of your own,
//     or one from known.WithClusters). The message says to use
//     known.WithCluster.
//   - ErrClusterNotFound: the named cluster is not part of the fleet. The
//     error names it.
//   - ErrClusterNotReady: the cluster is known but not Ready (starting,
//     failed and waiting to retry, or restarting after an Update); the
//     Server's Status tells why. The error names it.
//
// These are the same values as the server package's ErrClusterNotFound and
// ErrClusterNotReady. Errors from the cluster itself (NotFound, Conflict, a
// refused connection) come back unchanged, so apierrors.IsNotFound and
// friends work as usual; a write answered with a server error comes back
// wrapped in ErrOutcomeUnknown (see below), through which they still work.
//
// # Clusters that leave during a call
//
// Every call aimed at a cluster returns when that cluster leaves the fleet
// or restarts (an Update, a rotated token), whatever its ctx, and what it
// returns says what happened:
//
//   - An answer of the API server (AlreadyExists, Conflict, Invalid, any
//     Status error but a write's server errors, below; or success) is
//     returned as it is, also when it arrives as the cluster goes away.
//   - ErrClusterNotFound or ErrClusterNotReady means that nothing was
//     sent: the cluster was gone or stopping before the call's request
//     left. Retrying is safe.
//   - ErrOutcomeUnknown means that a write (Create, Update, Patch, Apply,
//     Delete, DeleteAllOf, or a write of Status() or SubResource(name)) was
//     sent and no answer came, or only a server error: the API server may
//     have applied it. It wraps the reason, and the error names the
//     cluster.
//
// A write already sent when its cluster leaves or restarts is not cut at
// once: it gets Options.WriteGrace (DefaultWriteGrace, 10s, for the
// Server's client), or less if its ctx ends sooner, to receive its answer.
// The member's Manager lets its writes in flight finish for as long (never
// longer than the members' GracefulShutdownTimeout) before its connections
// close, so the cluster's Delete or restart waits for them that long at
// most. Only if no answer comes by then does the write return
// ErrOutcomeUnknown. A write not sent yet when the cluster goes away ends
// at once. Whether a write was sent is learned from net/http (its request
// headers written, as net/http/httptrace reports them): a member whose
// rest.Config.Transport is not built on net/http's transport reports none
// of its writes as sent, so each one cut by its cluster's end returns
// ErrClusterNotFound or ErrClusterNotReady even if it reached the API
// server. A transport wrapping net/http's (WrapTransport, an
// authenticating RoundTripper) keeps the report. A write sent
// whose connection breaks, or whose own ctx ends before its answer, returns
// ErrOutcomeUnknown too (wrapping the ctx's error, so errors.Is(err,
// context.DeadlineExceeded) still holds). Reads have no outcome to lose:
// one cut because its cluster went away returns ErrClusterNotFound or
// ErrClusterNotReady.
//
// A write sent whose answer is a server error returns ErrOutcomeUnknown
// too, wrapping the error, so that apierrors.IsTimeout, IsInternalError,
// IsServiceUnavailable and the like still hold: a timeout (reason Timeout
// or ServerTimeout), an InternalError, or any other 5xx, whether the API
// server sent it as a Status or a gateway in front of it (a load
// balancer, an authenticating proxy) sent a body that is none (a 502, 503
// or 504). None of them says what became of the write: the API server may
// have applied it and its answer was lost on the way back, or may still
// apply it. A 503 is no exception: a proxy answers it when its upstream
// connection breaks after the request was forwarded as well as when it
// had nowhere to forward it, and the client cannot tell which. A member's
// client sends such a write once: client-go would send it again on its
// own after a 5xx that carries Retry-After, a Create with generateName
// making a second object, and a Server's members do not let it. Nor is the
// InternalError of an admission webhook that could not be called: the
// API server reports it as it reports a failure after storing. A client
// error (4xx: Conflict, Invalid, Forbidden, NotFound, or TooManyRequests,
// which says that the request was not processed) is the write's answer,
// returned as it is. Reads have no outcome to lose: they return any error
// of the API server as it is.
//
// To retry a write safely after ErrOutcomeUnknown, read first:
//
//   - An object with a fixed name: Get it by name. Found: the Create was
//     applied (compare what matters, or just carry on); not found: create
//     again. Or simply create again: AlreadyExists then says the first one
//     was applied. An Update carrying the resourceVersion it read cannot
//     apply twice (made again, it fails with Conflict): re-read and
//     decide. A Patch that sets values may be made again; one that is not
//     idempotent (a JSON patch that appends to a list) needs a re-read
//     first.
//   - An object created with generateName: its name is unknown until the
//     answer, so mark each object with a label or annotation of your own
//     that identifies what it is for (the owner's UID, a request ID), and
//     List by that label before creating again; or switch to a
//     deterministic name, so that a second Create fails with AlreadyExists
//     instead of making a second object. Remember the cached client may
//     not have seen the object yet: read with the cluster's APIReader
//     (Server.GetManager(name).GetAPIReader()) or requeue and read later.
//   - Delete and DeleteAllOf may simply be retried: deleting what is gone
//     is NotFound, or deletes nothing.
//
// # Fleet-wide List
//
// A List whose ctx names no cluster lists across the fleet: every cluster
// the Server knows, or only those named with known.WithClusters(ctx,
// names...). The clusters are listed concurrently, each from its own
// cache, and the list gets the union of their items, cluster by cluster in
// name order. List options (namespace, label and field selectors) apply
// in every cluster. A cluster's List that panics (in a client of your own
// under the member's) makes the List panic on its caller's goroutine, as
// a List of one cluster would, once every cluster's List has returned.
//
// Each returned item carries the annotation known.ClusterAnnotation
// ("mccr.dev/cluster") naming the cluster it came from, so that code can
// route a follow-up call:
//
//	for i := range pods.Items {
//		p := &pods.Items[i]
//		cctx := known.WithCluster(ctx, p.Annotations[known.ClusterAnnotation])
//		...
//	}
//
// The annotation exists only on the returned copies. Members' caches are
// never marked, also when the items share memory with the caches
// (client.UnsafeDisableDeepCopy among the List's options, or a cache that
// does not copy: cache.Options.DefaultUnsafeDisableDeepCopy, or
// UnsafeDisableDeepCopy in ByObject): the annotation is always set on
// copies of the maps that hold it. Create, Update and Patch, and Update
// and Patch of Status() and SubResource(name), remove it from the object
// before sending it, so a listed item can be written back as is without
// the annotation ever reaching an API server. A patch never mentions it,
// whatever its type (escaped or not): one computed from a listed item
// (client.MergeFrom of it) changes the annotations the caller changed and
// no other, and one of an object that is no listed item (read with a
// one-cluster Get) is controller-runtime's, byte for byte. Apply (and
// that of Status() and SubResource(name)) sends an apply configuration
// made from a listed item without it, as a configuration of the same type
// (a typed one stays typed, so read-your-writes sees the write as it sees
// any other), leaving the caller's configuration as it was. A one-cluster
// List does not set it.
//
// The list's resourceVersion and continue token are cleared: one
// cluster's means nothing for the union.
//
// Unstructured lists (set the list's kind, e.g. "ConfigMapList") and
// metadata-only lists (metav1.PartialObjectMetadataList) work the same
// way.
//
// # When clusters fail: ListError and Partial
//
// A fleet-wide List answers for the fleet, so by default it does not
// return a partial answer as if it were whole. When some clusters cannot
// be read, List returns a *ListError: its Failed map names each of them
// with its error, and Total says how many clusters were asked. The list
// still holds the items of every cluster that answered. A cluster cannot
// be read when it is not Ready (ErrClusterNotReady), when a name given to
// known.WithClusters is unknown (ErrClusterNotFound) or, with sharding, a
// cluster another replica runs (an *ElsewhereError, as for a call aimed at
// it), when it is marked unreachable (ErrClusterUnreachable, below), or
// when its List fails.
// errors.Is sees through a ListError to each cluster's error, while
// apierrors.IsNotFound and the like (and client.IgnoreNotFound) judge it as
// a whole: true only when every cluster that failed failed that way.
//
// To take what there is, pass a *Partial:
//
//	var partial client.Partial
//	err := c.List(ctx, &pods, &partial)
//	// err is nil even if clusters failed; partial.Failed names them.
//
// Partial.Failed is reset by every List. A List whose own ctx ends (its
// deadline passes, the caller cancels) returns that error in any case:
// that is no cluster's failure.
//
// # Unreachable members
//
// A member whose API server stops answering stays Ready: its informers
// retry on their own and its cache keeps the last state it saw, as a
// single-cluster Manager's would. Calls aimed at that member behave as
// they would there: reads answer from the cache, writes fail with the
// connection error. A fleet-wide List, which promises the state of the
// fleet, does not serve such a cache as if it were current: once the
// Server has seen the member's requests fail to reach its API server, it
// marks the member unreachable, and fleet-wide Lists report it as failed
// with ErrClusterUnreachable (in a ListError, or in Partial.Failed) until
// one of the member's requests gets an answer again; a fleet-wide List
// already waiting on the member (for a cache to sync) stops waiting and
// reports it so too.
//
// # Pagination
//
// Limit and Continue cannot span clusters: a fleet-wide List with either
// fails with ErrFleetPagination. To page, list one cluster at a time with
// known.WithCluster, as far as the member's cache supports it.
//
// # Clusters that come and go
//
// The routing table is read on every call (a lock-free atomic load), so a
// cluster added, deleted or restarted is seen by the next call. A
// fleet-wide List that runs while a cluster changes does not panic or
// hang: a cluster deleted meanwhile is left out of the answer, as if the
// List had started after the Delete (so one named with known.WithClusters
// is reported, as then, with ErrClusterNotFound); a cluster restarted
// meanwhile (an Update, a delete and re-add) is asked again, once, through
// its new Manager, or reported as not Ready if that is not Ready yet. A List
// waiting on a cluster's cache (the first List of a kind starts its
// informer and waits for it to sync) stops waiting when the cluster leaves.
//
// # Methods without a context
//
// Scheme, RESTMapper, GroupVersionKindFor and IsObjectNamespaced name no
// cluster, so they answer for the fleet: Scheme is the scheme from the
// Options given to NewServer, which every member shares; RESTMapper and
// IsObjectNamespaced use the host cluster's REST mapper, and for a kind the
// host does not serve, the first Ready member's (in name order, none marked unreachable) that does:
// a kind installed in the members alone maps as they map it, so wrappers
// such as client.NewNamespacedClient work for it too. For one member's own
// view of a kind, ask that member's client (Client.For).
//
// # No WithWatch
//
// The fan-out client does not implement client.WithWatch. Members'
// clients are cache-backed, and in controller-runtime watches belong to
// informers, which a Manager starts and stops with the cluster, resuming
// them across API server restarts; a raw watch through the fan-out client
// would outlive its cluster's removal and miss those restarts. Watch
// through a member's Manager instead: controllers set up with
// AddReconcilerSetup watch every cluster; for anything else take
// Server.GetManager(name) and use its cache's informers, or its
// GetAPIReader() for uncached reads.
//
// # Cost
//
// A call routed by ctx adds one context lookup, one atomic load and one
// map lookup to the member's own call, and allocates nothing: a cached Get
// through the fan-out client costs what the member's client costs. A
// fleet-wide List adds, per cluster, a list of the same type, a context
// that ends with the cluster, and the copy of its items into the merged
// list.
package client
