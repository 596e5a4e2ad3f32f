package server

import (
	"slices"
	"sync"
)

// memberOrder keeps, for Statuses, the members' records in the order of
// their names and a copy of their published statuses in that order (the
// view). A call copies the view, one array: visiting thousands of records
// and their statuses, scattered over the heap, would cost two cache misses
// per member, more than all the rest of a call at 10,000 members.
//
// The fan-out client's table keeps the names sorted, in a list it shares
// until a name comes or goes; the view follows one such list, and a new
// list makes a new view (build). A record routes its name while its member
// is desired and removes the route before it retires, so a name's record
// can change only along with the list.
//
// Records keep the view up to date themselves: each status a record
// publishes (its phases, probes every few seconds, kinds) is written into
// its slot of the view (put). A record without a slot in the view (its
// name is not in the view's list) is marked stale instead, and the next
// call copies its status then, if the list it serves has the name.
//
// Locks: mu is Statuses' own, held while it looks records up in the
// registry (no record waits for it: markLocked only tries it, under
// viewMu, and then takes nothing else). viewMu is a leaf, which records take
// as they publish, under their own lock; it is held for no longer than a
// copy of the view.
type memberOrder struct {
	mu    sync.Mutex
	names []string // the list the view was built for

	viewMu  sync.Mutex
	slots   []string        // names, for records looking their slot up
	records []*cluster      // by name; nil for a name without a record
	view    []ClusterStatus // records[i]'s status as published, when shown[i]
	shown   []bool          // records[i] has a published status (is desired)
	hidden  int             // how many are not shown
	stale   []*cluster      // records whose status the view may lack
	spare   []*cluster      // the other buffer of stale, reused

	// testBuilt, when set, is called by build once it has read the
	// statuses of the names new to the view, before it takes the others
	// from the old view.
	testBuilt func()
}

// put publishes p as c's status (nil: c is not desired): stores it for
// Status, and writes it into c's slot of the view or marks c stale, both
// under viewMu, so that the view always holds the last status of each of
// its records that is not marked. Called by c under its lock.
func (o *memberOrder) put(c *cluster, p *published) {
	o.viewMu.Lock()
	defer o.viewMu.Unlock()
	c.pub.Store(p)
	if i := o.slotLocked(c); i >= 0 {
		o.setLocked(i, p)
		return
	}
	o.markLocked(c)
}

// slotLocked returns c's slot in the view, -1 when c has none. The slot a
// record last had (c.slot) is tried first: it changes only as names before
// it come or go.
func (o *memberOrder) slotLocked(c *cluster) int {
	if i := int(c.slot.Load()); i < len(o.records) && o.records[i] == c {
		return i
	}
	i, found := slices.BinarySearch(o.slots, c.name)
	if !found || o.records[i] != c {
		return -1
	}
	c.slot.Store(int64(i))
	return i
}

func (o *memberOrder) markLocked(c *cluster) {
	if !c.stale {
		c.stale = true
		o.stale = append(o.stale, c)
	}
	// A program that never asks for Statuses would keep every record ever
	// marked, deleted members' included, for a call that never comes: once
	// many are marked, they are caught up with here, as the next call
	// would, unless a call is under way (its view being built, when only
	// the call may catch up) — it catches up itself.
	if len(o.stale) >= staleCatchUp && o.mu.TryLock() {
		o.catchUpLocked()
		o.mu.Unlock()
	}
}

// staleCatchUp is how many records may be marked stale before markLocked
// catches up with them (a variable for tests).
var staleCatchUp = 1024

// setLocked makes p the status of slot i.
func (o *memberOrder) setLocked(i int, p *published) {
	if o.shown[i] {
		o.hidden++
	}
	o.shown[i] = p != nil
	if p == nil {
		o.view[i] = ClusterStatus{}
		return
	}
	o.view[i] = p.status
	o.hidden--
}

// statuses appends to dst the published statuses of the records of names
// (the table's sorted names), in their order, skipping names that have no
// record or whose record is not desired. Unless names is a new list, it
// allocates nothing but what dst needs to grow.
func (o *memberOrder) statuses(dst []ClusterStatus, names []string, reg *registry) []ClusterStatus {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(names) != len(o.names) || len(names) > 0 && &names[0] != &o.names[0] {
		o.build(names, reg)
	}
	o.viewMu.Lock()
	defer o.viewMu.Unlock()
	o.catchUpLocked()
	out := slices.Grow(dst, len(o.view)-o.hidden)
	if o.hidden == 0 {
		return append(out, o.view...)
	}
	for i, ok := range o.shown {
		if ok {
			out = append(out, o.view[i])
		}
	}
	return out
}

// build makes the view of names. A name the old view has keeps its record
// and status from there, which its record has kept up to date (a record
// shown there is desired, so it is the name's record still); the others
// are looked up in the registry, their statuses read from their records.
// Only the latter touches records, and no lock of the view is held
// meanwhile: a record new to the view that publishes meanwhile is marked
// stale, and caught up with by the call.
func (o *memberOrder) build(names []string, reg *registry) {
	n := len(names)
	records := make([]*cluster, n)
	view := make([]ClusterStatus, n)
	shown := make([]bool, n)
	// from[i] is names[i]'s slot in the old view, -1 when it has none.
	// Both lists are sorted, and share the strings of the names they have
	// in common.
	from := make([]int, n)
	j := 0
	for i, name := range names {
		for j < len(o.names) && o.names[j] != name && o.names[j] < name {
			j++
		}
		if j < len(o.names) && o.names[j] == name {
			from[i] = j
			j++
			continue
		}
		from[i] = -1
		if c := reg.get(name); c != nil {
			records[i] = c
			c.slot.Store(int64(i))
			if p := c.published(); p != nil {
				view[i], shown[i] = p.status, true
			}
		}
	}
	if o.testBuilt != nil {
		o.testBuilt()
	}
	var lookUp []int // names whose old slot shows nothing: looked up again
	o.viewMu.Lock()
	for i, j := range from {
		switch {
		case j < 0:
		case o.shown[j]:
			records[i], view[i], shown[i] = o.records[j], o.view[j], true
		default:
			lookUp = append(lookUp, i)
		}
	}
	hidden := 0
	for _, ok := range shown {
		if !ok {
			hidden++
		}
	}
	o.slots, o.records, o.view, o.shown, o.hidden = names, records, view, shown, hidden
	o.viewMu.Unlock()
	o.names = names
	// Rare: a name routed just before its record first published, or whose
	// record was not desired when last seen (it may have retired since).
	// Looked up without viewMu held, as above; its slot is filled when the
	// record is caught up with.
	for _, i := range lookUp {
		c := reg.get(names[i])
		if c == nil {
			continue
		}
		c.slot.Store(int64(i))
		o.viewMu.Lock()
		o.records[i] = c
		o.markLocked(c)
		o.viewMu.Unlock()
	}
}

// catchUpLocked copies the statuses of the records marked stale into the
// view. A record of an earlier list, which is in none of this one's slots,
// is left out: it is copied when a list with its name comes.
func (o *memberOrder) catchUpLocked() {
	stale := o.stale
	o.stale, o.spare = o.spare, nil
	for _, c := range stale {
		c.stale = false
		if i := o.slotLocked(c); i >= 0 {
			o.setLocked(i, c.published())
		}
	}
	clear(stale) // no reference kept to records that may retire
	o.spare = stale[:0]
}
