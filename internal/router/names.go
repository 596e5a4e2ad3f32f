package router

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// names is a snapshot's cluster names, sorted. Snapshots share it until a
// name comes or goes; the one that adds or removes a name gets a new one
// that records only that change and its predecessor. The sorted slice is
// built on first read from the nearest predecessor already built and the
// changes since: a merge, linear in the fleet, with a sort of the changes
// alone. A fleet of thousands joining at once, with nobody reading the
// names meanwhile, costs a small record per name; a read after one more
// cluster joined costs a merge, not a sort of every name.
type names struct {
	once   sync.Once
	built  atomic.Bool
	sorted []string // valid once built; never changed after

	// The change this list makes to its predecessor: until built.
	prev  atomic.Pointer[names] // nil once built, or for the first
	name  string
	added bool
	// pending counts the unbuilt lists up to and including this one (0
	// once built by its writer). Written before the list is published.
	pending int
}

// emptyNames is the names of the empty table.
var emptyNames = func() *names {
	n := &names{}
	n.build()
	return n
}()

// maxPending bounds the changes a list may leave to its first reader: past
// it, the writer builds the list itself, so that a table whose names are
// never read does not keep a record of every name that ever came or went.
// Building costs a merge linear in the fleet, so that doing it once every
// size/8 changes keeps a change's share constant.
func maxPending(size int) int { return max(64, size/8) }

// with returns the names after name came (added) or went.
func (n *names) with(name string, added bool, size int) *names {
	next := &names{name: name, added: added, pending: 1}
	next.prev.Store(n)
	if !n.built.Load() {
		next.pending = n.pending + 1
	}
	if next.pending > maxPending(size) {
		next.build()
		next.pending = 0
	}
	return next
}

// list returns the sorted names; callers must not change it.
func (n *names) list() []string {
	n.build()
	return n.sorted
}

func (n *names) build() {
	n.once.Do(func() {
		// The changes since the nearest built list, newest first.
		var changes []*names
		base := n
		for !base.built.Load() {
			prev := base.prev.Load()
			if prev == nil {
				break // built meanwhile: a list lets its predecessor go only then
			}
			changes = append(changes, base)
			base = prev
		}
		n.sorted = apply(base.sorted, changes)
		n.built.Store(true)
		n.prev.Store(nil) // let the predecessors go
	})
}

// apply returns sorted with changes (newest first) made to it: the last
// change of each name decides whether it is in. The names between two
// changed ones are copied in one piece.
func apply(sorted []string, changes []*names) []string {
	if len(changes) == 0 {
		return sorted
	}
	type change struct {
		name string
		in   bool
	}
	seen := make(map[string]bool, len(changes))
	last := make([]change, 0, len(changes))
	for _, c := range changes {
		if !seen[c.name] {
			seen[c.name] = true
			last = append(last, change{c.name, c.added})
		}
	}
	slices.SortFunc(last, func(a, b change) int { return strings.Compare(a.name, b.name) })
	out := make([]string, 0, len(sorted)+len(last))
	i := 0
	for _, c := range last {
		k, _ := slices.BinarySearch(sorted[i:], c.name)
		j := i + k
		out = append(out, sorted[i:j]...)
		i = j
		if i < len(sorted) && sorted[i] == c.name {
			i++ // in before the changes: in after them only if their last says so
		}
		if c.in {
			out = append(out, c.name)
		}
	}
	return append(out, sorted[i:]...)
}
