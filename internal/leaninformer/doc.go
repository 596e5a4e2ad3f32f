// Package leaninformer provides a client-go SharedIndexInformer that hands
// events to its handlers in the goroutine that watches, for member clusters
// whose handlers only enqueue (controller-runtime's do).
//
// client-go's informer passes each event through a FIFO, a shared processor
// and a buffer per handler, each with goroutines of its own: seven per
// informer with one handler, and a 1,024-slot buffer per handler. Here the
// reflector (client-go's, unchanged) writes to a store that updates the
// indexer and calls the handlers at once: one goroutine runs the reflector,
// and the reflector's resync timer is the other.
//
// What a handler sees is what client-go's informer gives it, in the same
// order: the initial list as adds marked isInInitialList; a handler added
// later first gets the objects in the store as such adds, then the events
// that follow, none missed or doubled; a relist that finds an object gone
// delivers a DeletedFinalStateUnknown; an update that does not change the
// resourceVersion (a resync, or a relist of an unchanged object) goes only
// to handlers whose resync is due; the informer has synced once its store
// holds the initial list (a handler may read it, through a cache that waits
// for the sync, while it is handed the list), a registration once its
// handler has seen the initial list. Watch errors go to the handler set
// with SetWatchErrorHandlerWithContext, with client-go's backoff between
// attempts.
//
// What differs is timing. A handler that blocks holds up the informer's
// other handlers and its watch, where client-go buffers per handler; so a
// handler must not wait, inside a callback, for something only another
// delivery of the same informer brings. A handler added to a running
// informer is handed the store's objects in the caller's goroutine before
// AddEventHandler returns (its HasSynced is true then if the informer has
// synced), so the caller must not hold a lock the handler takes. Handlers may call any method of the
// informer, including adding and removing handlers. After
// RemoveEventHandler returns, at most the event under way reaches the
// handler; registrations have no ShutdownChan (client-go's
// ShutDownEventHandler reports an error). A handler that panics ends the
// process, as with client-go's default (utilruntime.ReallyCrash).
package leaninformer
