package server

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/internal/safe"
)

// ErrClusterNameTaken is the error of a watcher's event for a cluster name
// that another watcher given to Watch already feeds, or that was added with
// Server.Add; and of Server.Add, Update or Delete of a name a watcher feeds.
// The first source keeps the name, and the cluster is untouched; a
// watcher's refused config is kept aside and takes over if the first
// source deletes the cluster.
var ErrClusterNameTaken = errors.New("cluster name already fed by another source")

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

// claim is one source's config for a name.
type claim struct {
	from int // the watcher, by the order Watch was called; or byHand
	cfg  *config.NamedConfig
}

// byHand is the source of the names given to Server.Add.
const byHand = -1

func (c claim) source() string {
	s := c.cfg.Source.String()
	switch {
	case c.from == asHost:
		return s
	case c.from == byHand && s != "":
		return "Server.Add (" + s + ")"
	case c.from == byHand:
		return "Server.Add"
	case s != "":
		return s
	}
	return fmt.Sprintf("watcher #%d", c.from+1)
}

// takenByWatcher is the error of a call by hand on a name a watcher feeds.
func takenByWatcher(name string, call string, own claim) error {
	return fmt.Errorf("cluster %s: Server.%s: %w (%s); the cluster is unchanged", config.QuoteName(name), call, ErrClusterNameTaken, own.source())
}

// add is Server.Add under the claims: a name a watcher feeds is refused.
func (n *nameClaims) add(s *Server, nc *config.NamedConfig) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if own, ok := n.owner[nc.Name]; ok && own.from != byHand {
		return takenByWatcher(nc.Name, "Add", own)
	}
	if err := s.add(nc); err != nil {
		return err
	}
	n.own(nc.Name, claim{from: byHand, cfg: nc})
	return nil
}

// update is Server.Update under the claims: a name a watcher feeds is
// refused. It does not wait for the old Manager to stop.
func (n *nameClaims) update(s *Server, nc *config.NamedConfig) (<-chan struct{}, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if own, ok := n.owner[nc.Name]; ok && own.from != byHand {
		return nil, takenByWatcher(nc.Name, "Update", own)
	}
	stopped, err := s.update(nc)
	if err == nil {
		n.own(nc.Name, claim{from: byHand, cfg: nc})
	}
	return stopped, err
}

// remove is Server.Delete under the claims: a name a watcher feeds is
// refused; a watcher's config waiting for a name added by hand takes over
// once it is deleted. It does not wait for the old Manager to stop.
func (n *nameClaims) remove(s *Server, name string) (<-chan struct{}, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	own, owned := n.owner[name]
	if owned && own.from != byHand {
		return nil, takenByWatcher(name, "Delete", own)
	}
	stopped, err := s.remove(name)
	if err != nil || !owned {
		return stopped, err
	}
	delete(n.owner, name)
	// The cluster is deleted whatever becomes of the waiting config: a
	// failure to take over is that watcher's, reported with its errors,
	// and Delete still waits for the Manager it stopped.
	if err := n.handOver(s, name); err != nil {
		s.watchError(handOverKind, err)
	}
	return stopped, nil
}

func (n *nameClaims) own(name string, c claim) {
	if n.owner == nil {
		n.owner = map[string]claim{}
	}
	n.owner[name] = c
}

// handOver gives a name its owner let go of to the oldest waiting claim
// whose config the Server takes, if any. A waiting config comes from
// outside and was never applied: one that fails, or panics, is dropped
// (reported in the error) and the next in line is tried, so that a name
// is never owned by a claim that runs nothing — that would keep the name
// from Server.Add with no cluster behind it. It may run in a call by hand
// (Delete), which no panic from a watcher's config may reach.
func (n *nameClaims) handOver(s *Server, name string) error {
	var errs []error
	for len(n.waiting[name]) > 0 {
		next := n.waiting[name][0]
		n.unwait(name, next.from)
		what := fmt.Sprintf("cluster %s from %s: taking over", config.QuoteName(name), next.source())
		err := safe.Call(s.log, what, func() error {
			if err := s.put(next.cfg); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		n.own(name, next)
		s.log.Info("cluster's source deleted it; the next watcher that sent it takes over", "cluster", name, "from", next.source())
		break
	}
	return errors.Join(errs...)
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
		n.own(name, c)
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
		err := n.handOver(s, name)
		if _, taken := n.owner[name]; !taken {
			// Nobody took it over: the cluster its owner deleted goes.
			err = errors.Join(err, s.drop(name))
		}
		return err
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

// withdraw forgets the claims of watcher from: it stopped, and sends
// nothing more. Its waiting claims go. The names it owned keep their
// clusters, running as they are, but no longer belong to it, so that
// Server.Add, Update and Delete, or another watcher's next event, can take
// them: a stopped watcher could never let go of them itself.
func (n *nameClaims) withdraw(from int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for name := range n.waiting {
		n.unwait(name, from)
	}
	for name, own := range n.owner {
		if own.from == from {
			delete(n.owner, name)
		}
	}
}
