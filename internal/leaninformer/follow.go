package leaninformer

import (
	"sync"

	"k8s.io/apimachinery/pkg/watch"
)

// followedWatch is a watch as its pump follows it: it hands its events
// over one at a time, through a function the pump gives it, and reads the
// next only once asked. A watch therefore has at most one event waiting
// in its pump's inbox (and, after an error event, its end), and the pump's
// work for it does not grow with the number of watches it follows.
type followedWatch interface {
	watch.Interface
	// follow makes the watch hand its events to deliver from now on (ended
	// once it has ended): the next one as soon as it is there, each
	// further one once next is called. Called once, by the pump.
	follow(deliver func(e watch.Event, ended bool))
	// next asks for the event after the one last handed over. Called by
	// the pump, once per event, never after Stop.
	next()
}

// followable returns w as its pump follows it: a watch that reads its
// stream here (streamWatch) follows by itself; any other, client-go's or
// one of a ListerWatcher of its own, through its result channel
// (chanWatch).
func followable(w watch.Interface) followedWatch {
	if fw, ok := w.(followedWatch); ok {
		return fw
	}
	return &chanWatch{Interface: w, done: make(chan struct{})}
}

// chanWatch follows a watch through its result channel: an event already
// there is handed over at once, and otherwise a goroutine waits for the
// next one (or for Stop) and ends once it has handed it over.
type chanWatch struct {
	watch.Interface
	done    chan struct{} // closed by Stop
	stop    sync.Once
	deliver func(watch.Event, bool)
}

var _ followedWatch = (*chanWatch)(nil)

// Stop stops the watch and the goroutine waiting for its next event.
func (w *chanWatch) Stop() {
	w.stop.Do(func() {
		close(w.done)
		w.Interface.Stop()
	})
}

func (w *chanWatch) follow(deliver func(watch.Event, bool)) {
	w.deliver = deliver
	w.next()
}

func (w *chanWatch) next() {
	select {
	case e, ok := <-w.ResultChan():
		w.deliver(e, !ok)
	default:
		go w.wait()
	}
}

// wait hands over the watch's next event, unless it is stopped first.
func (w *chanWatch) wait() {
	select {
	case <-w.done:
	case e, ok := <-w.ResultChan():
		w.deliver(e, !ok)
	}
}
