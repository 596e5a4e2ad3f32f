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
// # Members
//
// Add, Update and Delete work before and after Start, from any goroutine,
// and never wait on the network: a member is started in the background and
// its progress is in Status (Pending, Starting, Syncing, Ready, Failed,
// Stopping, Stopped). A member that cannot be reached, rejects its
// credentials, or does not sync within Options.CacheSyncTimeout is Failed
// and retried with capped exponential backoff while every other member
// reconciles on; no member's trouble makes Start return. Update with a
// changed config restarts that member only; the same config again is a
// no-op. Delete needs only the name.
//
// Members run only while the host Manager leads: with leader election on,
// a standby Server keeps its members Pending until it takes over.
//
// Member Managers serve no metrics, probes, pprof or webhooks of their own
// and elect no leader. Webhooks registered in a setup on a member register
// nothing; register them on GetHostManager. Controller names may repeat
// across members (controller-runtime's process-wide uniqueness check is
// skipped for them).
//
// # Status and metrics
//
// Status and Statuses report each member's phase, since when, last error,
// next retry, failures and restarts. The same appears on the host metrics
// endpoint as mccr_cluster_ready, mccr_cluster_time_to_ready_seconds,
// mccr_cluster_failures_total and mccr_cluster_restarts_total, each with a
// cluster label. controller-runtime's own controller metrics have no
// cluster label: the same controller in every member adds to one series.
//
// The host's readyz and healthz checks are the user's own; the Server adds
// none, so one member down never turns the host unready. Add
// FleetReadyCheck if the host should count as ready only with members.
//
// # Feeding clusters
//
// Watch applies a configwatcher.ConfigWatcher (a kubeconfig file or
// directory, KubeFedCluster objects, or your own) to the Server.
package server
