package server

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
)

// ErrClusterNameTaken is the error of a watcher's event for a cluster name
// that another watcher given to Watch already feeds. The first watcher
// keeps the name; the other's config is kept aside and takes over if the
// first one deletes the cluster.
var ErrClusterNameTaken = errors.New("cluster name already fed by another watcher")

// nameClaims decides which watcher feeds each cluster name: the first to
// send it, until it deletes it. Another watcher's claim on the name is an
// error naming both sources; its latest config waits, and the oldest
// waiting claim takes over when the owner lets go, so nothing is lost.
// Decisions are applied to the Server under the claims' lock (taken before
// any cluster's lock; applying never blocks), so two watchers' events for
// one name take effect in the order they were decided.
type nameClaims struct {
	mu      sync.Mutex
	owner   map[string]claim
	waiting map[string][]claim
}

// claim is one watcher's config for a name.
type claim struct {
	from int // the watcher, by the order Watch was called
	cfg  *config.NamedConfig
}

func (c claim) source() string {
	if s := c.cfg.Source.String(); s != "" {
		return s
	}
	return fmt.Sprintf("watcher #%d", c.from+1)
}

// apply applies one event of watcher from.
func (n *nameClaims) apply(s *Server, from int, ev configwatcher.Event) error {
	name := ev.Config.Name
	n.mu.Lock()
	defer n.mu.Unlock()
	own, owned := n.owner[name]
	switch ev.Type {
	case configwatcher.Added, configwatcher.Updated:
		c := claim{from: from, cfg: ev.Config}
		if owned && own.from != from {
			n.wait(name, c)
			return fmt.Errorf("cluster %q from %s: %w (%s); keeping that one while it lasts", name, c.source(), ErrClusterNameTaken, own.source())
		}
		if err := s.put(ev.Config); err != nil {
			return err
		}
		if n.owner == nil {
			n.owner = map[string]claim{}
		}
		n.owner[name] = c
		return nil
	case configwatcher.Deleted:
		if !owned || own.from != from {
			n.unwait(name, from)
			if !owned {
				return s.drop(name)
			}
			return nil
		}
		delete(n.owner, name)
		if q := n.waiting[name]; len(q) > 0 {
			next := q[0]
			n.unwait(name, next.from)
			n.owner[name] = next
			s.log.Info("cluster's watcher deleted it; the next watcher that sent it takes over", "cluster", name, "from", next.source())
			return s.put(next.cfg)
		}
		return s.drop(name)
	}
	return errors.New("watcher sent an event of unknown type " + ev.Type.String())
}

func (n *nameClaims) wait(name string, c claim) {
	if n.waiting == nil {
		n.waiting = map[string][]claim{}
	}
	q := n.waiting[name]
	if i := slices.IndexFunc(q, func(w claim) bool { return w.from == c.from }); i >= 0 {
		q[i] = c // the newest config, in its first place in line
		return
	}
	n.waiting[name] = append(q, c)
}

func (n *nameClaims) unwait(name string, from int) {
	q := slices.DeleteFunc(n.waiting[name], func(w claim) bool { return w.from == from })
	if len(q) == 0 {
		delete(n.waiting, name)
		return
	}
	n.waiting[name] = q
}

// withdraw forgets the waiting claims of watcher from (it stopped).
func (n *nameClaims) withdraw(from int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for name := range n.waiting {
		n.unwait(name, from)
	}
}
