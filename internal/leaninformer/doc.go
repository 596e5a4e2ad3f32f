// Package leaninformer provides a client-go SharedIndexInformer for member
// clusters that costs no goroutine per handler while its handlers are idle.
//
// client-go's informer passes each event through a FIFO, a shared processor
// and a buffer per handler, each with goroutines of its own: seven per
// informer with one handler, and a 1,024-slot buffer per handler. Here the
// reflector (client-go's, unchanged) writes to a store that updates the
// indexer and appends the event to a queue per handler: one goroutine runs
// the reflector, and the reflector's resync timer is the other. A handler's
// queue is emptied by a goroutine started when an event is queued and
// ended when none is left, so a handler that takes its time (a map
// function that lists, say) holds up neither the watch, nor the store,
// nor the informer's other handlers, as with client-go.
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
// handler has been handed the initial list (controller-runtime's sources
// wait for that). Watch errors go to the handler set with
// SetWatchErrorHandlerWithContext, with client-go's backoff between
// attempts.
//
// A handler's queue grows without bound while the handler is slower than
// the events, as client-go's buffer does. Handlers may call any method of
// the informer, including adding and removing handlers. After
// RemoveEventHandler returns, at most the event under way reaches the
// handler and what was queued for it is dropped; registrations have no
// ShutdownChan (client-go's ShutDownEventHandler reports an error). Run
// returns once the handler calls under way have returned; what is still
// queued then is dropped, as client-go drops its buffers. A handler that
// panics ends the process, as with client-go's default
// (utilruntime.ReallyCrash).
package leaninformer
