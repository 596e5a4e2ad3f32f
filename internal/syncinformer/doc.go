// Package syncinformer wraps the informers of a controller-runtime cache to
// change how their sync is observed, through the DoneCheckers that
// informers and their handler registrations expose (HasSyncedChecker).
//
// Two uses, one per wrapper, shared by the member clusters of a Server and
// the KubeFed watcher:
//
//   - Wrap, for a cache.Options.NewInformer: every checker of the
//     informers it builds, and of their handler registrations, completes
//     when they have synced or when a channel the owner controls is closed.
//     controller-runtime's namespaced cache starts a goroutine per informer
//     and per registration that waits for such a checker; an informer
//     stopped before its first list never syncs, and those goroutines would
//     outlive the cache. The owner closes the channel when it stops. A kind
//     the owner's identity may not read (Kinds) counts as synced, so one
//     missing RBAC rule does not hold up every wait on the cache.
//
//   - Tracker, around the informers a cache hands out: it remembers the
//     checker of each informer and of each handler registration, so that
//     Wait returns as soon as all of them have synced, by notification,
//     instead of client-go's 100ms polling of HasSynced.
package syncinformer
