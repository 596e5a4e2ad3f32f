package shard

import (
	"context"
	"errors"
	"net"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/utils/ptr"
)

// The rules for a cluster's Lease, which say who may run the cluster:
//
//   - A replica runs a cluster only while its last write of the Lease
//     named it and stands: it wrote the version the Lease has, and it has
//     renewed its own Lease within the renew deadline ever since. A write
//     whose answer never came (a timeout, a lost answer; not a refused
//     connection, which sent nothing) counts only once a read from the API
//     server shows it applied: the Lease carries the renewTime it wrote.
//   - The Lease is the cluster's by its name (ClusterLeaseName), whatever
//     its annotations say: an altered ClusterAnnotation is repaired by the
//     next write, and never keeps a replica from handing over or taking.
//   - It takes a Lease that was released (no holder, written by the
//     holder's release of the version this replica last saw it claim),
//     that holds its own standing claim, or whose holder's claim has
//     expired: the Lease has
//     gone unchanged, as this replica saw it, for the duration it
//     declares, and its holder's replica Lease has too (read from the API
//     server before taking). A Lease that names this replica's identity
//     but was written by another process counts as another holder's, and
//     is taken only once this replica has been alone for that long.
//     Every take is an update at the version seen, so of two replicas
//     that judge at once only one succeeds.
//   - A Lease that vanished (deleted) or lost its holder without a
//     release (a hand edit, a restored copy of an old release) while this
//     replica saw it held is taken only once the duration its last holder
//     declared has passed, on this replica's clock, since it last saw it
//     held: the holder may still be stopping the cluster, and claims it
//     again meanwhile.
//   - It lets go of a cluster the assignment gives elsewhere: it stops the
//     cluster here, keeping (claiming again, creating again) the Lease
//     until its Manager has stopped, then releases the Lease (or deletes
//     it, for a cluster that left the fleet).
//   - Nobody takes a cluster from a replica that renews its Lease. So when
//     the Lease of a cluster this replica runs changes under it (a backup
//     restored, a GitOps tool applying an old copy, a hand edit), the
//     replica reads it to be sure and claims it again, and goes on running
//     it: the copy's holder would only take it after the copy had stood
//     for its whole duration. Whatever such edits do, a cluster stops and
//     starts at most once per edit.

// claim is this replica's part in one cluster's Lease.
type claim struct {
	running  bool            // told to run here (Members.Own)
	stopping <-chan struct{} // told to stop here; closes once it has
	watched  <-chan struct{} // the stopping channel a goroutine waits on to poke the loop
	since    time.Time       // when it was told to stop, while stopping
	slow     bool            // a stop that takes long was reported
	lastRV   string          // the version of this replica's last standing write
	epoch    int64           // the Coordinator's epoch when lastRV was written
	pending  bool            // a write of a claim whose outcome is unknown
	sent     time.Time       // the renewTime that write carries, while pending
	sentAt   int64           // the Coordinator's epoch when it was sent
	checked  time.Time       // last read to confirm someone else's write
	waiting  string          // why a cluster assigned here does not run yet, as last logged
}

// namesMe reports whether e names this process as its holder: this
// replica's identity, written by this process.
func (c *Coordinator) namesMe(e entry) bool {
	return !e.gone && e.rec.holder == c.o.Identity && e.rec.writer == c.o.Writer
}

// mine reports whether e holds this replica's standing claim.
func (c *Coordinator) mine(cl *claim, e entry) bool {
	return c.namesMe(e) && cl.lastRV != "" && e.lease.ResourceVersion == cl.lastRV
}

// confirm settles a pending claim by e, a version read from the API
// server: it applied if e carries what it wrote (holder, writer and the
// renewTime this process wrote). It reports whether it did.
func (c *Coordinator) confirm(cl *claim, e entry) bool {
	if !cl.pending {
		return false
	}
	if !c.namesMe(e) || !e.rec.renew.Equal(cl.sent) {
		return false
	}
	cl.lastRV, cl.epoch, cl.pending = e.lease.ResourceVersion, cl.sentAt, false
	return true
}

// resolve reads a cluster's Lease to settle a pending claim; it returns
// the Lease as read, and read false when the API server could not say.
func (c *Coordinator) resolve(ctx context.Context, name string, cl *claim) (e entry, exists, read bool) {
	leaseName := ClusterLeaseName(c.o.Group, name)
	if !c.refresh(ctx, leaseName) {
		return entry{}, false, false
	}
	e, exists = c.cache.get(leaseName)
	if !exists || !c.confirm(cl, e) {
		// Not applied (yet): a write that applies after this read names
		// this replica at a version it does not know, which it judges as
		// anyone's claim.
		cl.pending = false
	}
	return e, exists, true
}

// settle brings one cluster in line: owner is the replica the assignment
// gives it to, desired whether it is in the fleet, run whether this
// replica may run clusters now.
func (c *Coordinator) settle(ctx context.Context, name string, snap map[string]entry, owner string, desired, run bool) {
	cl := c.claims[name]
	if cl == nil {
		cl = &claim{}
		c.claims[name] = cl
	}
	defer func() {
		if !cl.running && cl.stopping == nil && cl.lastRV == "" && !cl.pending && cl.waiting == "" {
			delete(c.claims, name)
		}
	}()
	want := run && desired && owner == c.o.Identity
	if !want {
		cl.waiting = "" // not assigned here (any more): nothing to wait for
	}
	now := c.o.Clock.Now()
	// The Lease of this name is the cluster's, whatever its annotations
	// say (a hand edit, a copy of another cluster's Lease): the next write
	// repairs them.
	e, exists := snap[ClusterLeaseName(c.o.Group, name)]

	if cl.running && !want {
		c.log.V(1).Info("sharding: letting go of cluster", "cluster", name, "to", owner)
		cl.running = false
	}
	if !cl.running {
		c.tell(name, cl, c.statusOwner(e, exists, owner, now))
	}
	if c.stillStopping(ctx, name, cl, e, exists, want, now) {
		return
	}
	if cl.running {
		c.verify(ctx, name, cl, e, exists, now)
		return
	}
	c.renewIfDue(ctx)
	if !c.mayCall() {
		c.wait(name, cl, want, "no requests now (this replica's Lease not renewed, or the step's budget spent)")
		return // no writes while not renewed: its claims end with its Lease
	}
	if cl.pending && !want {
		var read bool
		if e, exists, read = c.resolve(ctx, name, cl); !read {
			return
		}
	}
	switch {
	case want:
		why := c.take(ctx, name, cl, e, exists, now)
		if why == "" && !c.hb.healthy(c.o.Clock.Now()) {
			why = "this replica's Lease lapsed while taking"
		}
		if why != "" {
			c.wait(name, cl, want, why)
			return
		}
		cl.running, cl.waiting = true, ""
		c.told[name] = ownTag
		c.members.Own(name)
	case exists && e.rec.holder == c.o.Identity && (e.rec.writer == c.o.Writer || c.hb.alone(now) && e.expired(now, c.o.LeaseDuration)):
		// Not this replica's to run, but its Lease still names it (as
		// this process wrote it, or as another process with this identity
		// did, long enough ago): it has stopped here, so it lets go.
		c.release(ctx, name, cl, e, desired)
	case !exists:
		cl.lastRV = "" // deleted after it stopped here: nothing to release
	}
}

// stillStopping reports whether the cluster still stops here. It still
// runs here meanwhile, under a claim that stands: its Lease stays this
// replica's until it has stopped, whoever deletes or rewrites it.
func (c *Coordinator) stillStopping(ctx context.Context, name string, cl *claim, e entry, exists, want bool, now time.Time) bool {
	if c.stopped(name, cl, now) {
		return false
	}
	if cl.lastRV != "" && cl.epoch == c.epoch || cl.pending && cl.sentAt == c.epoch {
		c.verify(ctx, name, cl, e, exists, now)
	}
	c.wait(name, cl, want, "still stopping here")
	return true
}

// wait notes, once per reason, why a cluster assigned to this replica does
// not run here yet.
func (c *Coordinator) wait(name string, cl *claim, want bool, why string) {
	if !want || cl.waiting == why {
		return
	}
	cl.waiting = why
	c.log.V(1).Info("sharding: cluster assigned here does not run yet", "cluster", name, "reason", why)
}

// stopped reports whether nothing of the cluster is left stopping here; a
// goroutine pokes the loop once it has.
func (c *Coordinator) stopped(name string, cl *claim, now time.Time) bool {
	if cl.stopping == nil {
		return true
	}
	select {
	case <-cl.stopping:
		if cl.slow {
			c.log.Info("sharding: cluster stopped here at last; its Lease can move", "cluster", name, "after", now.Sub(cl.since).Round(time.Millisecond).String())
		}
		cl.stopping, cl.slow = nil, false
		return true
	default:
	}
	if cl.watched != cl.stopping {
		cl.watched, cl.since = cl.stopping, now
		go func(ch <-chan struct{}) { <-ch; c.poke() }(cl.stopping)
	}
	if !cl.slow && now.Sub(cl.since) >= c.o.LeaseDuration {
		cl.slow = true
		c.log.Info("sharding: cluster still stopping here; its Lease stays with this replica until it has stopped", "cluster", name, "for", now.Sub(cl.since).Round(time.Millisecond).String())
	}
	return false
}

// tell lets Members know who runs a cluster this replica does not run, once
// per change; the channel Disown returns closes once nothing of the cluster
// runs here.
func (c *Coordinator) tell(name string, cl *claim, owner string) {
	if prev, ok := c.told[name]; ok && prev == owner {
		return
	}
	c.told[name] = owner
	cl.stopping = c.members.Disown(name, owner)
}

// statusOwner is who Members should say runs a cluster this replica does
// not: the Lease's holder if it is a live replica, else the replica the
// cluster is assigned to, else nobody yet.
func (c *Coordinator) statusOwner(e entry, exists bool, assigned string, now time.Time) string {
	if exists && e.rec.holder != "" && e.rec.holder != c.o.Identity && c.alive(e.rec.holder, now) {
		return e.rec.holder
	}
	if assigned != c.o.Identity {
		return assigned
	}
	return ""
}

// take claims a cluster's Lease for this replica, if the rules allow it
// now. It returns "" once the claim stands, else why it does not.
func (c *Coordinator) take(ctx context.Context, name string, cl *claim, e entry, exists bool, now time.Time) string {
	if cl.pending {
		// A claim whose answer never came: only a read says whether it
		// applied.
		var read bool
		if e, exists, read = c.resolve(ctx, name, cl); !read {
			return "confirming its claim failed"
		}
	}
	leaseName := ClusterLeaseName(c.o.Group, name)
	if !exists || e.rec.holder == "" && !c.released(leaseName, e) {
		if why := c.unheld(leaseName, exists, now); why != "" {
			return why
		}
	}
	if !exists {
		if !c.write(ctx, name, cl, nil, c.o.Identity) {
			return "creating its Lease failed"
		}
		if h, ok := c.held[leaseName]; ok && h.writer != c.o.Writer {
			c.handover(name, h.holder, h.at)
		}
		return ""
	}
	handover, since := false, time.Time{}
	switch {
	case e.rec.holder == "":
		// Unowned since this replica saw it released (or since it last saw
		// it held, for a Lease blanked by someone else), by its own clock.
		handover, since = true, e.since
		if h, ok := c.held[leaseName]; ok && !c.released(leaseName, e) {
			since = h.at
		}
	case c.mine(cl, e):
		if cl.epoch == c.epoch {
			// Written, and this replica renewed all along since: nobody can
			// have taken it. A write whose answer was lost is settled by
			// this read, without another write.
			cl.lastRV, cl.pending = e.lease.ResourceVersion, false
			return ""
		}
		// Its claim may have lapsed since: the update below stands only if
		// nobody took the Lease meanwhile.
	case !e.expired(now, c.o.LeaseDuration):
		return "held by " + e.rec.holder + ", whose claim has not expired"
	case e.rec.holder == c.o.Identity:
		if !c.hb.alone(now) {
			return "held under this identity by another process"
		}
	default:
		if c.alive(e.rec.holder, now) || c.confirmAlive(ctx, e.rec.holder) {
			return "held by " + e.rec.holder + ", which renews its replica Lease"
		}
		handover = true
		if r, ok := c.replicaEntry(e.rec.holder); ok {
			since = r.since // when this replica last saw it renew, by its own clock
		}
	}
	if !c.write(ctx, name, cl, &e, c.o.Identity) {
		return "writing its Lease failed"
	}
	if handover {
		c.handover(name, e.rec.holder, since)
	}
	return ""
}

// handover counts a cluster taken over from holder ("" for a release),
// unowned since then (a time of this replica's clock; zero if unknown).
func (c *Coordinator) handover(name, holder string, since time.Time) {
	var unowned time.Duration
	if !since.IsZero() {
		unowned = max(c.o.Clock.Since(since), 0)
	}
	c.o.Metrics.Handover(unowned)
	c.log.Info("sharding: took over cluster", "cluster", name, "from", holder, "unowned", unowned.Round(time.Millisecond).String())
}

// released reports whether e, a Lease without a holder, is its holder's
// release of the claim this replica last saw it hold, or a Lease this
// replica never saw held (since it started, or for a duration). A release
// carries ReleasedAnnotation, the version it released; a replica of an
// earlier release of mccr writes none, but its release is its own write
// (the holder's writer) with a renewTime past the one it held with, which
// neither a hand edit of the holder nor a restored copy has.
func (c *Coordinator) released(leaseName string, e entry) bool {
	h, ok := c.held[leaseName]
	if !ok {
		return true
	}
	if marker, marked := e.lease.Annotations[ReleasedAnnotation]; marked {
		return marker == h.rv
	}
	return e.rec.writer == h.writer && e.rec.renew.After(h.renew)
}

// unheld says why a Lease this replica saw held, and now finds deleted or
// without a holder that released it, may not be taken yet: its holder may
// still be stopping the cluster (and claims the Lease again meanwhile), so
// the duration it declared must pass since this replica last saw it held.
func (c *Coordinator) unheld(leaseName string, exists bool, now time.Time) string {
	h, ok := c.held[leaseName]
	if !ok || h.writer == c.o.Writer || !now.Before(h.at.Add(h.d)) {
		return ""
	}
	if !exists {
		return "its Lease, held by " + h.holder + ", was deleted; its holder may still be stopping it"
	}
	return "its Lease, held by " + h.holder + ", lost its holder without a release; its holder may still be stopping it"
}

// verify answers a change of the Lease of a cluster this replica runs.
func (c *Coordinator) verify(ctx context.Context, name string, cl *claim, e entry, exists bool, now time.Time) {
	if exists && c.mine(cl, e) && e.rec.cluster == name && e.role == RoleCluster {
		return
	}
	// Someone else's write, or the Lease is gone; the view may lag, so read.
	if now.Sub(cl.checked) < c.o.RetryPeriod || !c.mayCall() {
		return
	}
	cl.checked = now
	leaseName := ClusterLeaseName(c.o.Group, name)
	c.refresh(ctx, leaseName)
	fresh, ok := c.cache.get(leaseName)
	if ok && (c.mine(cl, fresh) || c.confirm(cl, fresh)) {
		cl.pending = false
		if fresh.rec.cluster != name || fresh.role != RoleCluster {
			c.write(ctx, name, cl, &fresh, c.o.Identity) // repair its annotations
		}
		return
	}
	c.log.Info("sharding: the Lease of a cluster this replica runs was changed by someone else; claiming it again",
		"cluster", name, "holder", fresh.rec.holder, "gone", !ok)
	var base *entry
	if ok {
		base = &fresh
	}
	c.renewIfDue(ctx)
	if c.hb.healthy(c.o.Clock.Now()) {
		c.write(ctx, name, cl, base, c.o.Identity)
	}
}

// release gives a cluster's Lease up: no holder, or deleted when the
// cluster left the fleet.
func (c *Coordinator) release(ctx context.Context, name string, cl *claim, e entry, desired bool) {
	if !desired {
		leaseName := ClusterLeaseName(c.o.Group, name)
		c.delete(ctx, leaseName, e)
		if _, ok := c.cache.get(leaseName); !ok {
			cl.lastRV, cl.pending = "", false
		}
		return
	}
	if c.write(ctx, name, cl, &e, "") {
		c.log.V(1).Info("sharding: released cluster", "cluster", name)
	}
}

// write sets the holder of a cluster's Lease at the version base shows
// (creates it when base is nil).
func (c *Coordinator) write(ctx context.Context, name string, cl *claim, base *entry, holder string) bool {
	c.budget--
	// As a Lease keeps it (MicroTime): a read compares it exactly.
	now := c.o.Clock.Now().Truncate(time.Microsecond)
	leaseName := ClusterLeaseName(c.o.Group, name)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName, Namespace: c.o.Namespace}}
	released := ""
	if base != nil {
		l = base.lease.DeepCopy()
		if holder == "" {
			released = base.lease.ResourceVersion // the claim it releases
		}
	}
	setMeta(l, c.o.Group, RoleCluster, c.o.Writer)
	setAnnotation(l, ClusterAnnotation, name)
	setAnnotation(l, ReleasedAnnotation, released)
	if prev := ptr.Deref(l.Spec.HolderIdentity, ""); prev != holder || l.Spec.AcquireTime == nil {
		if base != nil && holder != "" {
			l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
		}
		l.Spec.AcquireTime = &metav1.MicroTime{Time: now}
	}
	l.Spec.HolderIdentity = ptr.To(holder)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(c.o.LeaseDuration / time.Second)) //nolint:gosec // at most MaxLeaseDuration
	l.Spec.RenewTime = &metav1.MicroTime{Time: now}

	epoch := c.epoch
	rctx, cancel := context.WithTimeout(ctx, c.o.requestTimeout())
	var got *coordinationv1.Lease
	var err error
	if base == nil {
		got, err = c.leases.Create(rctx, l, metav1.CreateOptions{})
	} else {
		got, err = c.leases.Update(rctx, l, metav1.UpdateOptions{})
	}
	cancel()
	switch {
	case err == nil:
		c.cache.written(got)
		c.writes.ok()
		cl.lastRV, cl.pending = "", false
		if holder == c.o.Identity {
			cl.lastRV, cl.epoch = got.ResourceVersion, epoch
		}
		return true
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
		c.refresh(ctx, leaseName) // the version that won
	case apierrors.IsNotFound(err):
		c.cache.missing(leaseName)
	case sentNothing(err):
		c.writes.failed(err, "cluster", name)
	default:
		// Sent, outcome unknown: a read settles it (confirm).
		if holder == c.o.Identity {
			cl.pending, cl.sent, cl.sentAt = true, now, epoch
		}
		c.writes.failed(err, "cluster", name)
	}
	return false
}

// sentNothing reports whether a request failed before anything was sent:
// the connection was refused, or could not be made.
func sentNothing(err error) bool {
	var op *net.OpError
	return utilnet.IsConnectionRefused(err) || errors.As(err, &op) && op.Op == "dial"
}
