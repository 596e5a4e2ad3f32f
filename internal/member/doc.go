// Package member builds and runs the ctrl.Manager of one member cluster.
//
// controller-runtime's Manager is built to be the one Manager of a process:
// it runs eight runnable groups, leader election, metrics, health probes,
// pprof and a webhook server, and polls its caches while starting. A member
// of a fleet needs none of that (the host Manager does it once), and a
// fleet of a hundred members pays for every goroutine and every millisecond
// a hundred times. This Manager is a controller-runtime Cluster (cache,
// clients, event recorders) plus the runnables that reconciler setups add,
// and nothing else. It implements manager.Manager, so setups written for
// controller-runtime run unchanged.
//
// It keeps controller-runtime's start order: caches first (and their
// initial sync), then runnables that do not need leader election, then
// controllers and every other runnable. A runnable that reads the cache in
// its Start never sees a cache that has not started. Runnables that need
// leader election (controllers) start once Options.Elected is closed, the
// host Manager's election; until then the member serves its caches and
// its controllers' sources warm up, as on a controller-runtime standby.
//
// A controller that watches a kind its cluster does not serve (its CRD
// is not installed there, or not yet) does not hold up the member: the
// member syncs and its other controllers run, WaitingKinds names the kind,
// and the controller starts within seconds of the kind being served, with
// no restart. Options.Reconciled observes every Reconcile of the member's
// controllers, so that reconciles can be counted per cluster.
//
// Calls that only the host Manager can serve (health checks, metrics
// handlers, webhooks) return ErrHostOnly where their signature has an error
// and are logged once per Manager where it has none.
package member
