// Package leaninformer provides a client-go SharedIndexInformer for member
// clusters that costs no goroutine of its own while it watches, and none
// per handler while its handlers are idle.
//
// client-go's informer passes each event through a FIFO, a shared processor
// and a buffer per handler, each with goroutines of its own: seven per
// informer with one handler, and a 1,024-slot buffer per handler; its
// reflector adds a resync goroutine to every watch. Here a pump, a
// goroutine shared by up to 1,024 informers of the process, takes the events of
// the informers' watches, writes each change to the informer's indexer and
// appends the event to a queue per handler; it also runs their resync
// checks (a timer each) and their backoffs. All of it reaches the pump as
// messages in its inbox: a watch hands over one event at a time and reads
// the next only once the pump has taken it, and timers post when they
// fire, so the pump's work per event is the same whatever the number of
// informers it serves. A watch left to client-go (see take.go) costs one
// more goroutine, which waits for its next event. Lists and the opening of watches are requests that may take a
// while: each runs in a goroutine of its own that hands the outcome back.
// What a watching informer costs is its watch: the HTTP/2 stream's
// goroutine and the reader of the stream. A Runner's informer reads its
// stream itself where the HTTP client's transport hands it over
// (TakeWatch): a goroutine per event that waits for the event's first
// bytes on the smallest stack and holds no buffer meanwhile, where
// client-go's decoder keeps the stack and buffers it grew to while
// decoding the initial list (see take.go and stream.go). A pump ends once
// its last informer has stopped.
//
// The list-and-watch loop is client-go's reflector's, taken apart into
// steps: the initial list streamed through the watch that follows it
// (client-go's watch-list, see watchlist.go) or, where the server or the
// ListerWatcher does not offer that, a list (from the watch cache first,
// resource version "0"; from the last version seen after that; from etcd,
// "", once that version has expired or is too new; in pages when the
// server pages), then a watch from the list's version with bookmarks and
// a random timeout of 5 to 10 minutes; a watch that ends on its own is
// opened again at once from the last version seen (bookmarks move it),
// one that ends with an error (a 410 Expired among them) or without an
// event within a second is followed by a new list after client-go's
// backoff, as is a failed list or a watch that could not be opened; a
// refused connection or 429 backs off and watches again without a list.
// Watch errors go to the handler set with SetWatchErrorHandlerWithContext,
// the ones client-go's reflector hands it (a failed list, a watch that
// could not be opened), with a Reflector
// that only names the kind (TypeDescription) and is never run.
//
// An informer of New runs as client-go's does: Run blocks until its
// context ends. A Runner's informers run detached: Run hands them to a
// pump and returns, and they stop when the Runner's context ends, when the
// Runner stops, or one by one (Stop). controller-runtime runs each informer
// in a goroutine of its own for as long as Run lasts, with another that
// merges two stop channels; a cache whose informers run detached pays
// neither, and stops them itself (see Runner).
//
// A handler's queue is emptied by a goroutine started when an event is
// queued and ended when none is left, so a handler that takes its time (a
// map function that lists, say) holds up neither the watch, nor the
// store, nor the informer's other handlers, nor the other informers of its
// pump, as with client-go. No handler code runs in a pump, and a pump
// takes one event of a watch at a time, in the order the watches handed
// them over, so a burst on one watch holds up no other.
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
// wait for that).
//
// A handler's queue grows without bound while the handler is slower than
// the events, as client-go's buffer does. Handlers may call any method of
// the informer, including adding and removing handlers. After
// RemoveEventHandler returns, at most the event under way reaches the
// handler and what was queued for it is dropped; registrations have no
// ShutdownChan (client-go's ShutDownEventHandler reports an error). Run
// (of an informer of New) and a Runner's Stop return once the handler
// calls under way have returned; what is still queued then is dropped, as
// client-go drops its buffers. A handler that panics ends the process, as
// with client-go's default (utilruntime.ReallyCrash).
package leaninformer
