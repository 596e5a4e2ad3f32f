package configwatcher

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"

	"github.com/mccr-dev/mccr/config"
)

const (
	// publishEventBuffer lets a burst of events (every cluster of a fleet at
	// start, say) wait for a busy reader without holding up the watcher.
	// Events are never dropped: once the buffer is full, apply waits for the
	// reader or for stop.
	publishEventBuffer = 128

	// publishErrorBuffer is how many unread errors are kept. Reading Errors
	// is optional, so a full buffer drops its oldest error to make room for
	// the new one: the latest state of a source is what matters.
	publishErrorBuffer = 64
)

// publisher is the bookkeeping every ConfigWatcher shares: it owns the
// Events and Errors channels, remembers what it has published, and turns
// "this is the whole fleet now" into Added, Updated and Deleted events.
// A watcher only works out the desired set of clusters and hands it over.
//
// Use from goroutines: apply and published belong to one goroutine (the
// watcher's loop); report may be called from any goroutine; close must be
// called once the callers of apply and report have ended (close tolerates
// being called more than once). It never sends on a channel while holding a
// lock, so a reader that calls back into the watcher cannot deadlock it.
type publisher struct {
	log    logr.Logger
	events chan Event
	errors chan error

	// last maps a cluster name to what was last published for it. It
	// belongs to the goroutine calling apply.
	last map[string]publishedConfig
	// refused maps each desired name that config.ValidateName refuses to
	// the error reported for it, so that it is reported once while it
	// stays. It belongs to the goroutine calling apply.
	refused map[string]string

	closeOnce sync.Once
}

type publishedConfig struct {
	cfg         *config.NamedConfig
	fingerprint string
}

func newPublisher(log logr.Logger) *publisher {
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	return &publisher{
		log:     log,
		events:  make(chan Event, publishEventBuffer),
		errors:  make(chan error, publishErrorBuffer),
		last:    map[string]publishedConfig{},
		refused: map[string]string{},
	}
}

// apply publishes the difference between desired (the complete set of
// clusters, keyed by name; each value's Name must equal its key, nil values
// count as absent) and what was published before: Deleted for names that
// are gone, then Added for new names and Updated for names whose
// Fingerprint changed, each group sorted by name. A config with the same
// Fingerprint as the published one yields nothing.
//
// Sending waits for the reader; if stop closes first, apply returns false
// and remembers only what was actually delivered. The desired map is not
// retained.
func (p *publisher) apply(desired map[string]*config.NamedConfig, stop <-chan struct{}) bool {
	// Fingerprints are taken before a config is handed out, and a config
	// already published is never read again here: its consumers may copy
	// it meanwhile, and rest.CopyConfig writes into the ExecProvider the
	// copy shares with it.
	type change struct {
		ev          Event
		fingerprint string
	}
	var deleted, changed []change
	for name, old := range p.last {
		if desired[name] == nil {
			deleted = append(deleted, change{ev: Event{Type: Deleted, Config: old.cfg}})
		}
	}
	p.refuseInvalidNames(desired)
	for name, cfg := range desired {
		if cfg == nil {
			continue
		}
		if _, bad := p.refused[name]; bad {
			continue
		}
		old, ok := p.last[name]
		if ok && old.cfg == cfg {
			continue // the very config published: no change
		}
		fp := cfg.Fingerprint()
		switch {
		case !ok:
			changed = append(changed, change{Event{Type: Added, Config: cfg}, fp})
		case old.fingerprint != fp:
			changed = append(changed, change{Event{Type: Updated, Config: cfg}, fp})
		}
	}
	byName := func(a, b change) int { return strings.Compare(a.ev.Config.Name, b.ev.Config.Name) }
	slices.SortFunc(deleted, byName)
	slices.SortFunc(changed, byName)

	for _, c := range append(deleted, changed...) {
		ev := c.ev
		select {
		case p.events <- ev:
		case <-stop:
			return false
		}
		p.log.V(1).Info("cluster "+strings.ToLower(ev.Type.String()), "cluster", ev.Config.Name, "source", ev.Config.Source.String())
		if ev.Type == Deleted {
			delete(p.last, ev.Config.Name)
		} else {
			p.last[ev.Config.Name] = publishedConfig{cfg: ev.Config, fingerprint: c.fingerprint}
		}
	}
	return true
}

// refuseInvalidNames is the watchers' side of the one gate for cluster
// names (config.ValidateName): a desired cluster whose name it refuses is
// never published, and the refusal is reported once, naming the object or
// file that gave the name, for as long as that source keeps giving it.
// Nothing with such a name can have been published before. Watchers whose
// objects claim their clusters (settleClaims) refuse such names earlier,
// as broken objects, so that the cluster an object served keeps its last
// good config.
func (p *publisher) refuseInvalidNames(desired map[string]*config.NamedConfig) {
	for name := range p.refused {
		if desired[name] == nil {
			delete(p.refused, name)
		}
	}
	for name, cfg := range desired {
		if cfg == nil {
			continue
		}
		err := config.ValidateName(name)
		if err == nil {
			continue
		}
		src := cfg.Source.String()
		if src == "" {
			src = "an unnamed source"
		}
		err = fmt.Errorf("configwatcher: %s: %w; that cluster is left out", src, err)
		if p.refused[name] == err.Error() {
			continue
		}
		p.refused[name] = err.Error()
		p.report(err)
	}
}

// published returns what was last published for name, if anything: the
// "last good config" a watcher keeps when its source breaks.
func (p *publisher) published(name string) (*config.NamedConfig, bool) {
	pc, ok := p.last[name]
	return pc.cfg, ok
}

// report logs err and offers it on Errors without ever blocking: when the
// buffer is full the oldest unread error is dropped to make room.
func (p *publisher) report(err error) {
	if err == nil {
		return
	}
	p.log.Error(err, "config source problem")
	for {
		select {
		case p.errors <- err:
			return
		default:
		}
		// Full: drop the oldest. Another reporter or the reader may have
		// taken it already; either way there is room to try again.
		select {
		case dropped := <-p.errors:
			_ = dropped // logged when it was reported; err, newer, takes its place
		default:
		}
	}
}

// close closes both channels, once.
func (p *publisher) close() {
	p.closeOnce.Do(func() {
		close(p.events)
		close(p.errors)
	})
}
