package server

import "sync"

// memberOrder keeps, for Statuses, the members' records in the order of
// their names and a copy of their published statuses in that order (the
// view). A call copies the view, one array: visiting thousands of records
// and their statuses, scattered over the heap, would cost two cache misses
// per member, more than all the rest of a call at 10,000 members.
//
// The fan-out client's table keeps the names sorted, in a list it shares
// until a name comes or goes; the records are looked up once per such list,
// not on every call. A record routes its name while its member is desired
// and removes the route before it retires, so a name's record can change
// only along with the list: the records looked up for a list are its
// records for as long as the table serves that list.
//
// Records keep the view up to date themselves: each status a record
// publishes (its phases, probes every few seconds, kinds) is written into
// its slot of the view (put). A record without a slot in the view (its
// name is not in the view's list yet), or one that publishes while a new
// view is being built, is marked stale instead, and the next call copies
// its status then.
//
// Locks: mu is Statuses' own, held while it looks records up in the
// registry (no record waits for it). viewMu is a leaf, which records take
// as they publish, under their own lock; it is held for no longer than a
// copy of the view.
type memberOrder struct {
	mu    sync.Mutex
	names []string // the list the view was built for

	viewMu   sync.Mutex
	records  []*cluster      // by name; nil for a name without a record
	view     []ClusterStatus // records[i]'s status as published, when shown[i]
	shown    []bool          // records[i] has a published status (is desired)
	hidden   int             // how many are not shown
	building bool            // a new view is being built from the records
	stale    []*cluster      // records whose status the view may lack
	spare    []*cluster      // the other buffer of stale, reused

	// testBuilt, when set, is called by build between reading the
	// records' statuses and putting the new view in place.
	testBuilt func()
}

// put publishes p as c's status (nil: c is not desired): stores it for
// Status, and writes it into c's slot of the view or marks c stale, both
// under viewMu, so that a view not being built always holds the last
// status of each of its records that is not marked. Called by c under its
// lock.
func (o *memberOrder) put(c *cluster, p *published) {
	o.viewMu.Lock()
	defer o.viewMu.Unlock()
	c.pub.Store(p)
	i := int(c.slot.Load())
	placed := i < len(o.records) && o.records[i] == c
	if placed {
		o.setLocked(i, p)
	}
	// A view being built may have read c's status before this one.
	if (!placed || o.building) && !c.stale {
		c.stale = true
		o.stale = append(o.stale, c)
	}
}

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

// statuses returns the published statuses of the records of names (the
// table's sorted names), in their order, skipping names that have no
// record or whose record is not desired. Unless names is a new list, it
// allocates only the slice it returns.
func (o *memberOrder) statuses(names []string, reg *registry) []ClusterStatus {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(names) != len(o.names) || len(names) > 0 && &names[0] != &o.names[0] {
		o.build(names, reg)
	}
	o.viewMu.Lock()
	defer o.viewMu.Unlock()
	o.catchUpLocked()
	out := make([]ClusterStatus, 0, len(o.view)-o.hidden)
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

// build makes the view of names: looks their records up and copies their
// statuses, without holding viewMu, then puts the new view in place of
// the old. Records that publish meanwhile are marked stale (put), and
// caught up with once it is in place.
func (o *memberOrder) build(names []string, reg *registry) {
	o.viewMu.Lock()
	o.building = true
	o.viewMu.Unlock()
	records := make([]*cluster, len(names))
	view := make([]ClusterStatus, len(names))
	shown := make([]bool, len(names))
	hidden := 0
	for i, name := range names {
		c := reg.get(name)
		records[i] = c
		var p *published
		if c != nil {
			c.slot.Store(int64(i))
			p = c.published()
		}
		if shown[i] = p != nil; shown[i] {
			view[i] = p.status
		} else {
			hidden++
		}
	}
	if o.testBuilt != nil {
		o.testBuilt()
	}
	o.viewMu.Lock()
	o.records, o.view, o.shown, o.hidden = records, view, shown, hidden
	o.building = false
	o.viewMu.Unlock()
	o.names = names
}

// catchUpLocked copies the statuses of the records marked stale into the
// view. A record of an earlier list, which is in none of this one's slots,
// is left out: it is copied when a list with its name comes.
func (o *memberOrder) catchUpLocked() {
	stale := o.stale
	o.stale, o.spare = o.spare, nil
	for _, c := range stale {
		c.stale = false
		if i := int(c.slot.Load()); i < len(o.records) && o.records[i] == c {
			o.setLocked(i, c.published())
		}
	}
	clear(stale) // no reference kept to records that may retire
	o.spare = stale[:0]
}
