package server

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/internal/safe"
)

// Watch applies a ConfigWatcher's events to the Server until the watcher
// stops: Added → Add, Updated → Update, Deleted → Delete. It replaces the
// hand-written event loop of older multi-cluster libraries with one call,
// and can be called before or after Start, for as many watchers as needed.
//
// The Server owns the watcher from then on: it stops it when Start returns.
// Events are applied in order, and never wait for a Manager to stop: a
// cluster whose Manager takes its time to drain delays no other cluster's
// events, and the next Manager of a name starts once the previous one has
// stopped, as with Update and Delete. An Added event for
// a known name with a different config is applied as an Update, an Updated
// event for an unknown name as an Add, and a Deleted event for an unknown
// name is ignored, so a watcher and the Server never drift apart. A name is
// fed by the first watcher that sends it: another watcher's event for it is
// an ErrClusterNameTaken error naming both sources (the cluster keeps its
// config), and that watcher's config takes over only if the first watcher
// deletes the cluster. Errors from
// the watcher, and errors applying its events, are logged and kept: see
// WatchErrors.
func (s *Server) Watch(w configwatcher.ConfigWatcher) {
	s.mu.Lock()
	s.watchers = append(s.watchers, w)
	from := s.watchSeq
	s.watchSeq++
	stopped := s.stopped
	s.mu.Unlock()
	if stopped {
		w.Stop()
	}
	s.watchWG.Go(func() { s.applyEvents(from, w) })
}

func (s *Server) applyEvents(from int, w configwatcher.ConfigWatcher) {
	kind := watcherKind(w)
	events, errs := w.Events(), w.Errors()
	for events != nil || errs != nil {
		select {
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if err := s.applySafely(from, ev); err != nil {
				s.watchError(kind, err)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			s.watchError(kind, err)
		}
	}
	// A watcher that stopped sends nothing more: its claims go (its
	// clusters stay as they are).
	s.claims.withdraw(from)
}

// applySafely applies one event; a panic on it (its config comes from
// outside) fails that event only, reported as an error naming its cluster
// and source, and the watcher's next events are applied as usual.
func (s *Server) applySafely(from int, ev configwatcher.Event) error {
	what := "watcher event"
	if ev.Config != nil {
		what = fmt.Sprintf("%s event for cluster %s", ev.Type, config.QuoteName(ev.Config.Name))
		if src := ev.Config.Source.String(); src != "" {
			what += " from " + src
		}
	}
	return safe.Call(s.log, what, func() error { return s.apply(from, ev) })
}

func (s *Server) apply(from int, ev configwatcher.Event) error {
	if ev.Config == nil {
		return errors.New("watcher sent an event without a config")
	}
	return s.claims.apply(s, from, ev)
}

// put makes cfg the cluster's config: Add for a new name, Update for a
// known one. It never waits for a Manager to stop.
func (s *Server) put(cfg *config.NamedConfig) error {
	if err := validate(cfg); err != nil {
		return err
	}
	_, err := s.update(cfg)
	if errors.Is(err, ErrClusterNotFound) {
		return s.add(cfg)
	}
	return err
}

// drop deletes a cluster without waiting for it to stop; an unknown name
// is no error.
func (s *Server) drop(name string) error {
	_, err := s.remove(name)
	if errors.Is(err, ErrClusterNotFound) {
		return nil
	}
	return err
}

// maxWatchErrors bounds the errors WatchErrors keeps.
const maxWatchErrors = 32

// WatchError is an error from a watched ConfigWatcher, with when it came.
type WatchError struct {
	At  time.Time
	Err error
}

type watchErrors struct {
	mu   sync.Mutex
	errs []WatchError
}

// watchError keeps and logs an error of a watcher of the given kind
// (watcherKind), and counts it in mccr_watch_errors_total. The error is
// kept before it is counted: whoever sees the count sees it in
// WatchErrors.
func (s *Server) watchError(kind string, err error) {
	err = config.RedactError(err)
	s.werrs.mu.Lock()
	if len(s.werrs.errs) == maxWatchErrors {
		s.werrs.errs = s.werrs.errs[1:]
	}
	s.werrs.errs = append(s.werrs.errs, WatchError{At: time.Now(), Err: err})
	s.werrs.mu.Unlock()
	watchErrorsTotal.WithLabelValues(kind).Inc()
	s.log.Error(err, "config watcher")
}

// WatchErrors returns the most recent errors of the watchers given to Watch
// (at most 32, oldest first): broken kubeconfig files, missing Secrets, and
// events the Server could not apply.
func (s *Server) WatchErrors() []WatchError {
	s.werrs.mu.Lock()
	defer s.werrs.mu.Unlock()
	return append([]WatchError(nil), s.werrs.errs...)
}

// watcherKind names a watcher for the watcher label of
// mccr_watch_errors_total: its Go type, as "configwatcher.FileWatcher".
// Watchers of one type share a series; the label's values stay few.
func watcherKind(w configwatcher.ConfigWatcher) string {
	return strings.TrimPrefix(fmt.Sprintf("%T", w), "*")
}

// stopWatchers stops every watcher and waits for their event loops.
func (s *Server) stopWatchers() {
	s.mu.Lock()
	s.stopped = true
	ws := s.watchers
	s.watchers = nil
	s.mu.Unlock()
	for _, w := range ws {
		w.Stop()
	}
	s.watchWG.Wait()
}
