// Package server runs controller-runtime reconcilers across a fleet of
// Kubernetes clusters.
//
// A Server takes the place of ctrl.NewManager. It holds a host Manager,
// built from the *rest.Config and ctrl.Options given to NewServer exactly as
// ctrl.NewManager would build it, which owns everything there is one of:
// leader election, the metrics endpoint, health probes, webhooks, and any
// reconciler that works on the host cluster itself. Next to it, the Server
// keeps one Manager per member cluster. Every function registered with
// AddReconcilerSetup (typically an existing SetupWithManager) runs against
// every member's Manager, so an unchanged reconciler runs in every cluster:
//
//	srv, err := server.NewServer(ctrl.GetConfigOrDie(), ctrl.Options{Scheme: scheme})
//	r := &PodReconciler{Client: srv.GetClient()}
//	srv.AddReconcilerSetup(r.SetupWithManager)
//	srv.Add(config.NewNamedConfig("east", eastCfg))
//	srv.Start(ctrl.SetupSignalHandler())
//
// # The cluster in ctx
//
// The ctx passed to Reconcile names its cluster: known.ClusterFrom(ctx), or
// ctx.Value(known.ClusterContext) as older code reads it. The fan-out client
// returned by GetClient reads that name and sends each call to that
// cluster's cached client, so a reconciler's r.Get(ctx, ...) goes to the
// cluster the request came from. The logger in ctx carries a "cluster" key.
//
// A reconciler that holds per-cluster parts (an event recorder, say)
// is built inside its setup, once per member:
//
//	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
//		r := &Reconciler{Client: srv.GetClient(), Recorder: mgr.GetEventRecorder("x")}
//		return r.SetupWithManager(mgr)
//	})
//
// Which contexts carry the cluster: the ctx of Reconcile; the ctx given to
// the map functions and predicates of a member's controllers (they run on
// events of that member's informers, with the controller's ctx); and the
// ctx given to Start of any runnable added to a member's Manager in a
// setup. The ctx of the host Manager's own controllers and runnables names
// no cluster: pick one with known.WithCluster.
//
// # Members
//
// Add, Update and Delete work before and after Start, from any goroutine,
// and never wait on the network: a member is started in the background and
// its progress is in Status (Pending, Queued, Starting, Syncing, Ready,
// Unreachable, Failed, Stopping, Stopped). At most
// Options.MaxConcurrentStarts members (8 per core by default) are in their
// starts at once, the newest waiting first; the others are Queued, and a
// Delete of one returns at once. A member that cannot be
// reached, rejects its credentials, or does not sync within
// Options.CacheSyncTimeout is Failed and retried with capped exponential
// backoff while every other member reconciles on; no member's trouble makes
// Start return. A Ready member whose API server stops answering is
// Unreachable: it serves from its cache and restarts once the API server
// answers. Its requests' and watches' errors tell, and so does a probe
// every Options.ReachProbeInterval (bounded by ReachProbeTimeout and, across
// the fleet, MaxConcurrentProbes) when it makes no requests or its API
// server hangs. Update with a changed config restarts that member only,
// unless only its bearer token, token file or basic auth changed: those are
// swapped into the running member. The same config again is a no-op.
// Delete needs only the name.
//
// At most one Manager runs for a cluster name at any instant: Update and
// Delete stop the running Manager, and the next one of that name starts
// only once it has stopped, however Add, Update, Delete and leadership
// changes interleave. Update and Delete return when it has (or with
// ErrStopTimeout after Options.StopTimeout). Calls through the fan-out
// client that wait on a cluster (a cache that has not synced, an API server
// that does not answer) return ErrClusterNotFound or ErrClusterNotReady as
// soon as the cluster is deleted or restarted, whatever the caller's ctx,
// when nothing was sent. A write already sent gets the write grace (10 s,
// never more than the members' GracefulShutdownTimeout) for its answer and
// returns it, or ErrOutcomeUnknown: it may have been applied, so read
// before retrying. Update and Delete wait for such a write that long at
// most.
//
// A 401 makes a running member renew its credential (its exec plugin run
// again, its token file read again, the token of the latest Update) and
// send the refused request once more; its credentials count as rejected
// only when still refused ReachProbeInterval after the first refusal, or
// on a 403 on discovery (which every authenticated user may read); the
// member is then Failed and retried. A 403 on one kind is a missing RBAC rule: it is recorded in
// Status, and the member's other controllers carry on. So is a 403 of the
// host's on a host kind that member controllers watch (HostKind,
// HostObject): Status.Unserved of each such member names the kind, with a
// " (host)" suffix, until the host Manager is granted the rule; the host's
// objects then reach the controllers, without a restart.
//
// With leader election on, every replica runs its members' caches and
// the runnables that need no leader election, so reads through the fan-out
// client and webhooks work on a standby and a new leader starts warm; the
// members' controllers start once the host Manager is elected
// (Options.ColdStandby: members run only while it leads). A Server that
// loses its lease, or whose ctx ends, marks every member Stopping and stops
// it before Start returns; a member still stopping Options.StopTimeout
// after that (a reconciler that ignores its ctx) no longer holds Start,
// which returns ErrStopTimeout naming it, as a controller-runtime Manager
// returns after its graceful shutdown timeout (whatever the host Manager's
// own timeout). Once Start has returned, Add is ErrServerStopped.
//
// Member Managers serve no metrics, probes, pprof or webhooks of their own
// and elect no leader. On a member's Manager, AddHealthzCheck,
// AddReadyzCheck and AddMetricsServerExtraHandler return an error, and
// webhooks registered through GetWebhookServer are logged once and
// ignored: register those on the Server itself (which forwards them to the
// host Manager, as a kubebuilder main.go expects) or on GetHostManager.
// Controller names may repeat across members (controller-runtime's
// process-wide uniqueness check is skipped for them); two Servers in one
// process still share controller-runtime's check for their host
// controllers.
//
// Each member's Manager starts its runnables in controller-runtime's
// order: caches first (and their initial sync), then runnables that need
// no leader election, then controllers and the rest. Its
// GracefulShutdownTimeout is the one in the ctrl.Options given to
// NewServer, with controller-runtime's meaning (nil is 30s, zero does not
// wait, negative waits as long as it takes), and its runnables (Reconcile
// among them) get a context made by that ctrl.Options.BaseContext, when
// set, with the member's logger and name added.
//
// A member's informers queue each event per handler, in the order
// client-go's informers would, with a delivery goroutine only while a
// handler has events waiting: a slow handler (a map function of Watches
// that makes an uncached call, say) holds up no other handler of the kind
// nor the cache. Options.ClientGoInformers gives members client-go's
// informers; a cache.Options.NewInformer of yours is used either way.
//
// # Status and metrics
//
// Status and Statuses report each member's phase, since when, last error,
// next retry, failures and restarts. The same appears on the host metrics
// endpoint as mccr_cluster_ready, mccr_cluster_time_to_ready_seconds,
// mccr_cluster_failures_total, mccr_cluster_setup_errors_total,
// mccr_cluster_restarts_total, mccr_cluster_reachable, the histogram
// mccr_cluster_probe_seconds and mccr_cluster_phase (one series per member,
// its phase), each with a cluster label; the counters exist at zero from Add on. controller-runtime's
// own controller metrics have no cluster label (the same controller in every
// member adds to one series), so every Reconcile of a member's controller is
// also counted per cluster: mccr_reconcile_total{cluster,controller,result},
// mccr_reconcile_errors_total and the mccr_reconcile_time_seconds
// histogram. Every series of a cluster goes when it is deleted, and every
// member's when its Server's Start returns. Two Servers of one process that
// both have a member of the same name share its series (counters add up,
// gauges show the last change of either) until neither has it: give them
// distinct names.
//
// A member whose controllers watch a kind its API server does not serve yet
// (a CRD not installed there) is Ready all the same: its other controllers
// run, Status.WaitingFor names the kind, and the waiting controller starts
// within seconds of the CRD being installed, without a restart. So for a
// host kind the host does not serve yet (HostKind, HostObject):
// Status.WaitingFor names it with a " (host)" suffix
// ("example.com/v1, Kind=Policy (host)").
// ClusterStatus.Properties, and ClusterProperties from a reconciler's ctx,
// give what the cluster's source says about it (a ClusterProfile's
// properties, for example).
//
// # Controllers that span clusters
//
// Three sources connect the host and the members. FleetKind gives a
// controller on the host Manager the events of one kind from every member,
// the member named in the handler's ctx. HostObject gives a member's
// controller the events of a host kind through the builder's Watches (its
// WithEventFilter and predicates apply), so that a host object enqueues
// work in each member; HostKind is the same as a raw source. ClusterEvents tells a host controller when a member
// becomes Ready, Unreachable or Failed, or leaves the fleet. Each follows
// the fleet as it changes and leaves nothing behind of a member that left.
//
// The host's readyz and healthz checks are the user's own; the Server adds
// none, so one member down never turns the host unready. Add
// FleetReadyCheck if the host should count as ready only with members.
//
// # Feeding clusters
//
// Watch applies a configwatcher.ConfigWatcher (a kubeconfig file or
// directory, KubeFedCluster objects, or your own) to the Server. Its events
// never wait for a Manager to stop, so one cluster's slow drain delays no
// other cluster.
package server
