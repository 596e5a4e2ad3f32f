package shard

import (
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// maxHistory bounds how many superseded versions of a Lease the cache
// remembers, to drop a lagging watch's copies of them.
const maxHistory = 8

// history is what the cache remembers of a Lease's replaced versions.
type history struct {
	versions []string  // resourceVersions seen replaced, oldest first
	at       time.Time // when the last was replaced
}

// record is what a Lease says of its holder's claim. As client-go's leader
// election compares whole records, a replica counts any change to it as a
// sign of life of its writer, timed by its own clock when it saw the
// change: the clock of the machine that wrote renewTime never enters a
// judgement.
type record struct {
	holder      string
	duration    int32
	renew       time.Time
	acquire     time.Time
	transitions int32
	writer      string
	leaving     string
	standby     string
	cluster     string
	pins        string
	loadFactor  string
}

func recordOf(l *coordinationv1.Lease) record {
	r := record{
		holder:      ptr.Deref(l.Spec.HolderIdentity, ""),
		duration:    ptr.Deref(l.Spec.LeaseDurationSeconds, 0),
		transitions: ptr.Deref(l.Spec.LeaseTransitions, 0),
		writer:      l.Annotations[WriterAnnotation],
		leaving:     l.Annotations[LeavingAnnotation],
		standby:     l.Annotations[StandbyAnnotation],
		cluster:     l.Annotations[ClusterAnnotation],
		pins:        l.Annotations[PinsAnnotation],
		loadFactor:  l.Annotations[LoadFactorAnnotation],
	}
	if l.Spec.RenewTime != nil {
		r.renew = l.Spec.RenewTime.Time
	}
	if l.Spec.AcquireTime != nil {
		r.acquire = l.Spec.AcquireTime.Time
	}
	return r
}

// entry is what this replica knows of one Lease.
type entry struct {
	// lease is shared and never written: copy it before a change.
	lease *coordinationv1.Lease
	rec   record
	// role is RoleReplica or RoleCluster: the Lease's label, or, when its
	// labels were stripped (a hand edit, a tool's apply), what its name
	// says: the Lease at a Group's Lease name is the Group's.
	role string
	// id is, for a replica's Lease, the identity its name is the Lease
	// name of: its holder, or when the holder was edited away from it, the
	// holder last seen there. An edit of holderIdentity renames no
	// replica.
	id string
	// since is when this replica first saw rec (its local clock).
	since time.Time
	// floor is, for a replica's Lease, when the claims of the records seen
	// before rec ran out, by the durations they declared: a new record (a
	// hand edit of the replica's duration, say) never ends its claim
	// sooner than it said it would. (A cluster's Lease stands while its
	// holder's replica Lease does; a handover to a replica with a shorter
	// duration must not inherit the longer one.)
	floor time.Time
	// gone: the Lease was deleted. A replica's Lease is kept that way
	// while its claim may still stand (its holder may still run clusters).
	gone bool
	// watched: the watch delivered this version; else it came from a read
	// or a write of this replica, and a relist that misses it may be older.
	watched bool
	at      time.Time // when this version arrived
}

// declared is how long the Lease's holder said its claim lasts after a
// renewal: its leaseDurationSeconds, bounded by maxLeaseDuration so that a
// hostile value cannot keep a cluster from running for years; fallback
// when the Lease does not say.
func (e *entry) declared(fallback time.Duration) time.Duration {
	if e.rec.duration <= 0 {
		return fallback
	}
	return min(time.Duration(e.rec.duration)*time.Second, MaxLeaseDuration)
}

// expired reports whether the Lease's record has gone unchanged, as this
// replica saw it, for the duration its writer declared, and the claims of
// the records before it have run out too.
func (e *entry) expired(now time.Time, fallback time.Duration) bool {
	return !now.Before(e.until(fallback))
}

// until is when the Lease's claim runs out unless its record changes.
func (e *entry) until(fallback time.Duration) time.Time {
	end := e.since.Add(e.declared(fallback))
	if e.floor.After(end) {
		return e.floor
	}
	return end
}

// cache is this replica's view of its Group's Leases, fed by the watch
// (watched, relist) and by its own reads (fresh) and writes (written). A
// read comes from the API server and wins over anything seen before; a
// write's answer wins over what the watch delivered so far unless that is
// a later version; a version the replica has seen replaced is never taken
// back from a watch that lags — the stale copy a lagging informer holds is
// exactly what made renewals conflict for as long as it lagged.
type cache struct {
	clock clock.PassiveClock
	group string
	key   string // GroupKey(group)
	// The prefixes of the Group's replica and cluster Lease names.
	replicaPrefix, clusterPrefix string
	// grace is how long a version from a read or write survives relists
	// that do not show it yet.
	grace time.Duration
	// fallback is the duration of a claim whose Lease declares none.
	fallback time.Duration
	notify   func()

	mu         sync.Mutex
	entries    map[string]*entry
	superseded map[string]*history // by Lease name
	synced     bool
	lastEvent  time.Time // last delivery of the watch (event or list)
}

func newCache(clk clock.PassiveClock, group string, grace, fallback time.Duration, notify func()) *cache {
	key := GroupKey(group)
	return &cache{
		clock: clk, group: group, key: key, replicaPrefix: key + "-" + replicaInfix, clusterPrefix: key + "-" + clusterInfix, grace: grace, fallback: fallback, notify: notify,
		entries: map[string]*entry{}, superseded: map[string]*history{},
	}
}

// roleOf returns the role of l in the Group, "" when l is none of the
// Group's Leases. The name decides, as only the Group's Leases have its
// names (they hash the whole Group), whatever labels someone edited; a
// Lease at another name is the Group's only as its annotation, not its
// label (a hash), says exactly.
func (c *cache) roleOf(l *coordinationv1.Lease) string {
	g, annotated := l.Annotations[GroupAnnotation]
	if annotated && g != c.group {
		return ""
	}
	switch {
	case strings.HasPrefix(l.Name, c.replicaPrefix):
		return RoleReplica
	case strings.HasPrefix(l.Name, c.clusterPrefix):
		return RoleCluster
	}
	if role := l.Labels[RoleLabel]; annotated && (role == RoleReplica || role == RoleCluster) {
		return role
	}
	return ""
}

// belongs reports whether l is one of the Group's Leases.
func (c *cache) belongs(l *coordinationv1.Lease) bool { return c.roleOf(l) != "" }

// fresh takes l as read from the API server by a read sent at sent (the
// cache's clock): what the API server had then, whatever this replica saw
// before — even a version that compares lower (etcd restored from a
// backup) — but not over a later version of the Lease that arrived while
// the read was under way (the read's answer was already old).
func (c *cache) fresh(l *coordinationv1.Lease, sent time.Time) {
	if !c.belongs(l) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.entries[l.Name]; old != nil && !old.gone && old.at.After(sent) && older(l, old.lease) {
		return
	}
	c.takeLocked(l, true)
}

// written takes l as a write's answer: the API server's version when it
// applied the write, unless a later version is known already (the answer
// came late, after the watch delivered another replica's write).
func (c *cache) written(l *coordinationv1.Lease) {
	if !c.belongs(l) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.takeLocked(l, false)
}

func (c *cache) takeLocked(l *coordinationv1.Lease, read bool) {
	if h := c.superseded[l.Name]; h != nil {
		h.versions = slices.DeleteFunc(h.versions, func(rv string) bool { return rv == l.ResourceVersion })
	}
	c.putLocked(l, false, read)
}

// watched takes l as the watch delivered it.
func (c *cache) watched(l *coordinationv1.Lease) {
	c.mu.Lock()
	c.lastEvent = c.clock.Now()
	changed := c.belongs(l) && c.watchedLocked(l)
	c.mu.Unlock()
	if changed && c.notify != nil {
		c.notify()
	}
}

func (c *cache) watchedLocked(l *coordinationv1.Lease) bool {
	if h := c.superseded[l.Name]; h != nil && slices.Contains(h.versions, l.ResourceVersion) {
		return false
	}
	return c.putLocked(l, true, false)
}

// putLocked stores l; read says it was read from the API server, and so
// stands even if an earlier version of the Lease is known.
func (c *cache) putLocked(l *coordinationv1.Lease, watched, read bool) (changed bool) {
	now := c.clock.Now()
	old := c.entries[l.Name]
	e := &entry{lease: l, rec: recordOf(l), role: c.roleOf(l), since: now, watched: watched, at: now}
	if e.role == RoleReplica && l.Name == ReplicaLeaseName(c.group, e.rec.holder) {
		e.id = e.rec.holder
	}
	if old != nil {
		if !old.gone && old.lease.ResourceVersion == l.ResourceVersion {
			old.watched = old.watched || watched
			return false
		}
		if !old.gone && !read && older(l, old.lease) {
			// A write's answer that arrives after the watch delivered a
			// later write (another replica's take of a Lease this one just
			// released, say), or a watch behind a write's answer: the later
			// version stands. Replacing it would make this replica's next
			// write conflict, and its judgement of the holder start over.
			// A read always wins: after a restore from backup the API
			// server's versions may compare lower than those seen before.
			return false
		}
		if e.id == "" && old.role == e.role {
			e.id = old.id
		}
		if old.rec == e.rec {
			e.since, e.floor = old.since, old.floor
		} else if old.role == RoleReplica && e.role == RoleReplica {
			e.floor = old.until(c.fallback)
		}
		if !old.gone {
			c.supersedeLocked(l.Name, old.lease.ResourceVersion)
		}
	}
	c.entries[l.Name] = e
	return true
}

// older reports whether l is an earlier version of the same Lease than
// cur: same UID, and a resourceVersion that compares lower (API servers
// backed by etcd give integers, comparable as Kubernetes allows for one
// object). Versions that do not compare are never called older.
func older(l, cur *coordinationv1.Lease) bool {
	if l.UID != cur.UID {
		return false
	}
	cmp, err := resourceversion.CompareResourceVersion(l.ResourceVersion, cur.ResourceVersion)
	return err == nil && cmp < 0
}

func (c *cache) supersedeLocked(name, rv string) {
	h := c.superseded[name]
	if h == nil {
		h = &history{}
		c.superseded[name] = h
	}
	h.versions = append(h.versions, rv)
	if len(h.versions) > maxHistory {
		h.versions = slices.Delete(h.versions, 0, len(h.versions)-maxHistory)
	}
	h.at = c.clock.Now()
}

// watchedDelete takes the watch's word that l was deleted.
func (c *cache) watchedDelete(l *coordinationv1.Lease) {
	c.mu.Lock()
	c.lastEvent = c.clock.Now()
	old := c.entries[l.Name]
	// A delete of an earlier incarnation, delivered late, spares the one
	// this replica has just created.
	changed := old != nil && !old.gone && (old.watched || old.lease.UID == l.UID)
	if changed {
		c.deleteLocked(l.Name)
	}
	c.mu.Unlock()
	if changed && c.notify != nil {
		c.notify()
	}
}

// missing takes a read's word that the Lease name does not exist.
func (c *cache) missing(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.entries[name]; old != nil && !old.gone {
		c.deleteLocked(name)
	}
}

// deleteLocked forgets a Lease; a replica's stays as a tombstone with its
// record and since, for its claim may stand until its declared duration
// has passed (prune drops it then).
func (c *cache) deleteLocked(name string) {
	old := c.entries[name]
	c.supersedeLocked(name, old.lease.ResourceVersion)
	if old.role != RoleReplica {
		delete(c.entries, name)
		return
	}
	e := *old
	e.gone, e.at = true, c.clock.Now()
	c.entries[name] = &e
}

// relist replaces what the watch delivered with a list's items.
func (c *cache) relist(items []coordinationv1.Lease) {
	c.mu.Lock()
	now := c.clock.Now()
	c.lastEvent, c.synced = now, true
	listed := make(map[string]bool, len(items))
	for i := range items {
		if !c.belongs(&items[i]) {
			continue
		}
		// A copy: a pointer into items would keep the whole list (every
		// Lease of the group as listed then) for as long as this Lease
		// stays unchanged, which a cluster's Lease may for months.
		l := items[i]
		listed[l.Name] = true
		c.watchedLocked(&l)
	}
	for name, e := range c.entries {
		// A version from a read or write may be newer than the list; it
		// stays until the watch shows it, for a while. One without the
		// Group's label, read by its name, no list can show: it stays
		// until a read or the watch says otherwise.
		if !listed[name] && !e.gone && (e.watched || now.Sub(e.at) >= c.grace) && e.lease.Labels[GroupLabel] == c.key {
			c.deleteLocked(name)
		}
	}
	c.mu.Unlock()
	if c.notify != nil {
		c.notify()
	}
}

// touch records that the watch is alive (a bookmark).
func (c *cache) touch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastEvent = c.clock.Now()
}

// prune drops the tombstones of replicas whose claims ended a declared
// duration ago: kept that long after the claim itself, a tombstone still
// tells when a replica that died last renewed, for the time its clusters
// went unowned. It drops the histories of Leases gone for two durations
// (fallback) too.
func (c *cache) prune(now time.Time, fallback time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, e := range c.entries {
		if e.gone && !now.Before(e.since.Add(2*e.declared(fallback))) && e.expired(now, fallback) {
			delete(c.entries, name)
		}
	}
	// The history of a Lease the cache no longer holds (a cluster that
	// left) goes once no lagging watch can still bring its versions back:
	// kept, it would grow with every cluster the fleet ever had.
	for name, h := range c.superseded {
		if _, held := c.entries[name]; !held && !now.Before(h.at.Add(2*fallback)) {
			delete(c.superseded, name)
		}
	}
}

// blind restarts every record's clock at now: while this replica could not
// reach the API server it saw no renewal, so silence over that time tells
// nothing of the others.
func (c *cache) blind(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		if e.since.Before(now) {
			e.since = now
		}
	}
}

// get returns a copy of the entry for name.
func (c *cache) get(name string) (entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[name]
	if !ok {
		return entry{}, false
	}
	return *e, true
}

// snapshot returns a copy of every entry.
func (c *cache) snapshot() map[string]entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]entry, len(c.entries))
	for name, e := range c.entries {
		out[name] = *e
	}
	return out
}

// state returns whether the first list arrived, and when the watch last
// delivered anything.
func (c *cache) state() (synced bool, lastEvent time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.synced, c.lastEvent
}
