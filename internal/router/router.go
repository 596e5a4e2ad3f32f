// Package router holds the table the fan-out client reads on every call:
// which clusters exist and, for the Ready ones, their client.
//
// Reads are a single atomic load of an immutable snapshot, so the hot path
// takes no lock and never waits for a writer. Writers (cluster lifecycle
// events and reachability changes, both rare) copy the snapshot's map under
// a mutex and swap it in. A change to a known name replaces only that
// name's entry (an atomic pointer); a name that comes or goes copies one
// of the map's shards (a 64th of it) and records itself in the sorted
// names, which are merged on first read (names.go); the lists of members
// are built once per snapshot, by the first read that needs them, in the
// order of the names. A fleet joining at once costs a small copy per
// cluster, not a copy of everything and a sort per change, and a read of
// the names after one more joined costs a merge, not a sort.
package router

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/client"
)

// route is one cluster's entry. A route is immutable once published; a
// change makes a new one.
type route struct {
	client crclient.Client // nil: no running Manager
	// ready is false while the Manager behind client is still syncing:
	// calls aimed at the cluster go to it and wait for its caches, as do
	// fleet-wide Lists; only ReadyClusters leaves it out.
	ready bool
	// ctx ends when client stops being the cluster's route (replaced,
	// removed, or no longer Ready). Nil when client is.
	ctx    context.Context
	cancel context.CancelFunc
	// reach ends with ctx, and when the cluster is marked unreachable
	// (cause: the error fleet-wide Lists report), so that a fleet-wide
	// List waiting on the cluster stops waiting then. A route marked
	// reachable again gets a new one. Nil when client is.
	reach       context.Context
	reachCancel context.CancelCauseFunc
	// unreachable is the error that made the cluster's API server count as
	// unreachable, nil while it is reachable.
	unreachable error
	// elsewhere is set while another replica runs the cluster (sharding);
	// owner names it ("" when none does right now).
	elsewhere bool
	owner     string
}

// shards is how many maps the routes are split into, by name.
const shards = 64

type snapshot struct {
	// routes holds each name's slot in the shard of its name; a shard is
	// shared by snapshots until a name of it comes or goes.
	routes [shards]map[string]*slot
	// names are the names of routes, sorted, shared by snapshots until a
	// name comes or goes; size counts them.
	names *names
	size  int
	once  sync.Once
	lists lists // built from names and routes by the first read that needs them
}

type lists struct {
	members []client.Member // every cluster this replica runs, sorted by name
	ready   []client.Member // the Ready ones, sorted by name
}

// slot holds a name's current route.
type slot struct{ atomic.Pointer[route] }

// shardOf returns the shard of name (FNV-1a).
func shardOf(name string) int {
	h := uint32(2166136261)
	for i := range len(name) {
		h ^= uint32(name[i])
		h *= 16777619
	}
	return int(h % shards)
}

// slot returns name's slot, nil if the name is unknown.
func (s *snapshot) slot(name string) *slot { return s.routes[shardOf(name)][name] }

// get returns name's current route.
func (s *snapshot) get(name string) (*route, bool) {
	sl := s.slot(name)
	if sl == nil {
		return nil, false
	}
	return sl.Load(), true
}

// sorted returns the snapshot's lists, building them on first use.
func (s *snapshot) sorted() *lists {
	s.once.Do(func() { s.lists = s.listsOf() })
	return &s.lists
}

// Table maps cluster names to clients. The zero value is an empty table. It
// implements client.Fleet.
type Table struct {
	mu  sync.Mutex // serialises writers only
	cur atomic.Pointer[snapshot]
}

var _ client.Fleet = &Table{}

var empty = &snapshot{names: emptyNames}

func (t *Table) load() *snapshot {
	if s := t.cur.Load(); s != nil {
		return s
	}
	return empty
}

// Route returns the cluster's entry: its client and the context that ends
// when that client stops being its route. An entry without a client (no
// running Manager) is ErrClusterNotReady.
func (t *Table) Route(name string) (client.Member, error) {
	r, ok := t.load().get(name)
	switch {
	case !ok:
		return client.Member{}, client.NotFound(name)
	case r.elsewhere:
		return client.Member{}, client.Elsewhere(name, r.owner)
	case r.client == nil:
		return client.Member{}, client.NotReady(name)
	}
	return client.Member{Name: name, Client: r.client, Context: r.ctx}, nil
}

// Cluster returns the client of a Ready cluster. A cluster marked
// unreachable still has one: single-cluster calls go to it as they would
// to a single-cluster Manager whose API server is down.
func (t *Table) Cluster(name string) (crclient.Client, error) {
	r, ok := t.load().get(name)
	switch {
	case !ok:
		return nil, client.NotFound(name)
	case r.elsewhere:
		return nil, client.Elsewhere(name, r.owner)
	case r.client == nil:
		return nil, client.NotReady(name)
	}
	return r.client, nil
}

// Members returns every cluster, Ready or not, sorted by name.
func (t *Table) Members() []client.Member { return t.load().sorted().members }

// ReadyClusters returns the clusters that are Ready and reachable, sorted by
// name.
func (t *Table) ReadyClusters() []client.Member { return t.load().sorted().ready }

// Names returns every known cluster name, Ready or not, sorted.
func (t *Table) Names() []string { return slices.Clone(t.SortedNames()) }

// SortedNames is Names without the copy: the slice is shared, and callers
// must not change it.
func (t *Table) SortedNames() []string { return t.load().names.list() }

// Set records name with c as its client (nil: known, no running Manager)
// and whether the cluster is Ready. Callers serialise Set and Remove for
// one name themselves (the Server does so under its lock), so the table
// needs no notion of ownership.
//
// Setting a new client starts a new route: the previous client's Member
// context ends and any unreachable mark is cleared (a new Manager starts
// with fresh caches). Setting the same client again only updates ready.
func (t *Table) Set(name string, c crclient.Client, ready bool) {
	ready = ready && c != nil
	t.update(name, func(old *route) *route {
		if old != nil && old.client == c && !old.elsewhere {
			if old.ready == ready {
				return old
			}
			next := *old
			next.ready = ready
			return &next
		}
		r := &route{client: c, ready: ready}
		if c != nil {
			r.ctx, r.cancel = context.WithCancel(context.Background())
			r.reach, r.reachCancel = context.WithCancelCause(r.ctx)
		}
		return r
	})
}

// SetElsewhere records that another replica runs name (owner; "" when
// none does right now): calls aimed at it fail with
// client.ErrClusterElsewhere, and fleet-wide calls leave it out. Set makes
// it this replica's again.
func (t *Table) SetElsewhere(name, owner string) {
	t.update(name, func(old *route) *route {
		if old != nil && old.elsewhere && old.owner == owner {
			return old
		}
		return &route{elsewhere: true, owner: owner}
	})
}

// Remove forgets name.
func (t *Table) Remove(name string) {
	t.update(name, func(*route) *route { return nil })
}

// SetUnreachable records that the Ready cluster name's API server cannot
// be reached (err non-nil) or can be again (err nil). While it is marked,
// fleet-wide Lists report the cluster as failed with an error wrapping
// client.ErrClusterUnreachable instead of serving its possibly stale
// cache, and those already waiting on the cluster (for a cache to sync)
// stop waiting and report it so; calls aimed at the cluster alone are
// unaffected. Only the first error of an outage is kept, so repeated
// reports cost one atomic load. Unknown and not-Ready names are ignored.
func (t *Table) SetUnreachable(name string, err error) {
	r, ok := t.load().get(name)
	if !ok || r.client == nil || (r.unreachable == nil) == (err == nil) {
		return
	}
	t.update(name, func(old *route) *route {
		if old == nil || old.client == nil || (old.unreachable == nil) == (err == nil) {
			return old
		}
		next := *old
		next.unreachable = err
		if err != nil {
			old.reachCancel(client.Unreachable(name, err))
		} else {
			next.reach, next.reachCancel = context.WithCancelCause(next.ctx)
		}
		return &next
	})
}

// update replaces name's route with what change makes of it (old is nil
// for an unknown name; returning old changes nothing, nil removes the
// name) and publishes a new snapshot. A route the change does not carry
// on (a new client, elsewhere, removed) ends its Member context once the
// snapshot without it is published: a call woken by its end that looks
// the name up again sees what replaced it (gone, not Ready, a new route),
// never the route that just ended.
func (t *Table) update(name string, change func(old *route) *route) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.load()
	sl := cur.slot(name)
	var old *route
	if sl != nil {
		old = sl.Load()
	}
	next := change(old)
	if next == old {
		return
	}
	snap := &snapshot{routes: cur.routes, names: cur.names, size: cur.size}
	shard := &snap.routes[shardOf(name)]
	switch {
	case next == nil:
		*shard = maps.Clone(*shard)
		delete(*shard, name)
		snap.size--
		snap.names = cur.names.with(name, false, snap.size)
	case sl == nil:
		snap.size++
		snap.names = cur.names.with(name, true, snap.size)
		*shard = maps.Clone(*shard)
		if *shard == nil {
			*shard = map[string]*slot{}
		}
		sl = &slot{}
		sl.Store(next)
		(*shard)[name] = sl
	default:
		sl.Store(next)
	}
	t.cur.Store(snap)
	if old != nil && old.cancel != nil && (next == nil || next.ctx != old.ctx) {
		old.cancel()
	}
}

// listsOf builds the lists in the order of the names, from each name's
// route as it is now, reading each route once.
func (s *snapshot) listsOf() lists {
	names := s.names.list()
	l := lists{members: make([]client.Member, 0, len(names))}
	for _, name := range names {
		r := s.slot(name).Load()
		if r.elsewhere {
			continue // another replica's: not in this one's fleet-wide calls
		}
		mem := client.Member{Name: name, Client: r.client, Context: r.ctx, Reachable: r.reach}
		// A cluster whose Manager still syncs is read like a cached client
		// reads a cache that has not synced yet: the List waits for it.
		switch {
		case r.client == nil:
			mem.Err = client.NotReady(name)
		case r.unreachable != nil:
			mem.Err = client.Unreachable(name, r.unreachable)
		}
		l.members = append(l.members, mem)
		if mem.Err == nil && r.ready {
			l.ready = append(l.ready, mem)
		}
	}
	return l
}
