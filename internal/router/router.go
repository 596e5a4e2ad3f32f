// Package router holds the table the fan-out client reads on every call:
// which clusters exist and, for the Ready ones, their client.
//
// Reads are a single atomic load of an immutable snapshot, so the hot path
// takes no lock and never waits for a writer. Writers (cluster lifecycle
// events, rare) copy the snapshot under a mutex and swap it in.
package router

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/client"
)

type snapshot struct {
	routes map[string]crclient.Client // nil: not Ready
	ready  []client.Member            // sorted by name
}

// Table maps cluster names to clients. The zero value is an empty table. It
// implements client.Fleet.
type Table struct {
	mu  sync.Mutex // serialises writers only
	cur atomic.Pointer[snapshot]
}

var _ client.Fleet = &Table{}

var empty = &snapshot{}

func (t *Table) load() *snapshot {
	if s := t.cur.Load(); s != nil {
		return s
	}
	return empty
}

// Cluster returns the client of a Ready cluster.
func (t *Table) Cluster(name string) (crclient.Client, error) {
	c, ok := t.load().routes[name]
	switch {
	case !ok:
		return nil, client.NotFound(name)
	case c == nil:
		return nil, client.NotReady(name)
	}
	return c, nil
}

// ReadyClusters returns the Ready clusters, sorted by name.
func (t *Table) ReadyClusters() []client.Member { return t.load().ready }

// Names returns every known cluster name, Ready or not, sorted.
func (t *Table) Names() []string {
	s := t.load()
	names := make([]string, 0, len(s.routes))
	for n := range s.routes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Set records name with c as its client; nil means known but not Ready.
// Callers serialise Set and Remove for one name themselves (the Server does
// so under its lock), so the table needs no notion of ownership.
func (t *Table) Set(name string, c crclient.Client) {
	t.update(func(m map[string]crclient.Client) { m[name] = c })
}

// Remove forgets name.
func (t *Table) Remove(name string) {
	t.update(func(m map[string]crclient.Client) { delete(m, name) })
}

func (t *Table) update(change func(map[string]crclient.Client)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.load()
	m := make(map[string]crclient.Client, len(old.routes)+1)
	for k, v := range old.routes {
		m[k] = v
	}
	change(m)
	next := &snapshot{routes: m}
	for n, c := range m {
		if c != nil {
			next.ready = append(next.ready, client.Member{Name: n, Client: c})
		}
	}
	slices.SortFunc(next.ready, func(a, b client.Member) int { return strings.Compare(a.Name, b.Name) })
	t.cur.Store(next)
}
