package shard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

const (
	// period is how often the loop looks again when nothing pokes it.
	period = 250 * time.Millisecond
	// maxRequestsPerStep bounds the reads and writes of cluster Leases in
	// one step, so that a step stays short and the replica's own Lease is
	// renewed in time.
	maxRequestsPerStep = 32
)

// ErrDuplicateIdentity is the readiness error of a replica that sees
// another process renew its Lease.
var ErrDuplicateIdentity = errors.New("another process renews this replica's Lease")

// Coordinator is one replica's part in splitting a fleet among replicas
// through Leases in one namespace of the host cluster:
//
//   - a heartbeat renews the replica's own Lease (heartbeat.go);
//   - the live replicas are those whose Leases changed, as this replica saw
//     them, within the lease duration each declared (peers, below);
//   - each cluster is assigned to one live replica by bounded-load hashing
//     (ring.go);
//   - a replica runs a cluster only while it holds the cluster's Lease,
//     taken and released under the rules of claims.go;
//   - a watchdog stops every cluster once the replica's Lease has gone
//     unrenewed for the renew deadline, whatever the loop is doing.
//
// It tells the fleet what to run through Members and is never called back
// by it. Its state belongs to the loop's goroutine.
type Coordinator struct {
	o       Options
	leases  coordclient.LeaseInterface
	members Members
	log     logr.Logger
	cache   *cache
	watch   *watcher
	hb      *heartbeat
	kick    chan struct{}
	// fences counts the watchdog's firings; the loop drops what it thought
	// ran when it changes.
	fences atomic.Int64
	fenced atomic.Bool

	// The loop's state.
	seenFences int64
	claims     map[string]*claim
	told       map[string]string // name → owner last told to Members ("" none; ownTag: this replica)
	// records holds, by name, the Members' record of each cluster this
	// replica has to do with (absent: none) as last seen: a new record
	// is told afresh.
	records map[string]any
	// held remembers, by Lease name, the last version of each cluster
	// Lease this replica saw held, and when it last saw it so: a Lease
	// that vanishes or loses its holder without a release waits for the
	// duration its holder declared (claims.go).
	held       map[string]heldMark
	wasHealthy bool
	// epoch changes whenever this replica may have lost its claims: its
	// renewals lapsed, the watchdog fired, or another process wrote its
	// Lease. A claim written in the current epoch still stands.
	epoch   int64
	joined  bool // healthy once
	leaving bool
	// share is how many clusters the last step assigned to this replica,
	// or -1 while it may run none (not joined, its Lease not renewed, not
	// alone with its identity, leaving): read by Share.
	share  atomic.Int64
	writes *failures // of cluster Leases and deletions
	budget int
}

// ownTag is what told holds for a cluster this replica was told to run.
const ownTag = "\x00own"

// absent is what records holds for a name the Members have no record of.
type absent struct{}

// heldMark is what a replica remembers of a cluster Lease it saw held.
type heldMark struct {
	holder, writer, rv string
	renew              time.Time     // the renewTime its holder wrote (its clock: compared, never measured)
	at                 time.Time     // last seen so, by this replica's clock
	d                  time.Duration // the duration its holder declared
}

// New returns the Coordinator of replica o.Identity, working on leases (a
// client of o.Namespace's Leases).
func New(leases coordclient.LeaseInterface, members Members, o Options) *Coordinator {
	o.defaults()
	log := o.Logger.WithValues("replica", o.Identity)
	c := &Coordinator{
		o: o, leases: leases, members: members, log: log,
		kick:    make(chan struct{}, 1),
		claims:  map[string]*claim{},
		told:    map[string]string{},
		records: map[string]any{},
		held:    map[string]heldMark{},
	}
	c.share.Store(-1) // not joined yet
	c.cache = newCache(o.Clock, o.Group, o.RenewDeadline, o.LeaseDuration, c.poke)
	// A list of many Leases on a loaded server takes longer than a renewal.
	c.watch = newWatcher(leases, o.Group, c.cache, o.Clock, o.RetryPeriod, max(o.LeaseDuration, 10*time.Second), log)
	c.hb = newHeartbeat(&c.o, leases, c.cache, log)
	c.writes = newFailures(log, o.Clock, recoveredAfter, "sharding: cannot write a cluster's Lease", "sharding: writing cluster Leases again")
	// The series exist from the start, at zero.
	o.Metrics.Owned(0)
	o.Metrics.DuplicateIdentity(false)
	return c
}

func (c *Coordinator) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Check is a readiness check (healthz.Checker): it fails while another
// process renews this replica's Lease.
func (c *Coordinator) Check(*http.Request) error {
	if c.hb.dupFlag.Load() {
		return fmt.Errorf("sharding: replica %q: %w: give each replica its own identity", c.o.Identity, ErrDuplicateIdentity)
	}
	return nil
}

// Start coordinates until ctx ends, then hands this replica's clusters
// over and removes its Lease.
func (c *Coordinator) Start(ctx context.Context) error {
	// The watch outlives ctx: leaving needs it.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	wg.Go(func() { c.watch.run(wctx) })
	if !c.waitSynced(ctx) {
		return nil
	}
	c.log.Info("sharding: joining", "namespace", c.o.Namespace, "group", c.o.Group, "lease", c.hb.name)
	wg.Go(func() { c.watchdog(wctx.Done()) })
	t := c.o.Clock.NewTicker(period)
	defer t.Stop()
	for ctx.Err() == nil {
		c.step(context.WithoutCancel(ctx))
		select {
		case <-ctx.Done():
		case <-c.kick:
		case <-t.C():
		}
	}
	c.share.Store(-1)
	c.leave()
	return nil
}

func (c *Coordinator) waitSynced(ctx context.Context) bool {
	t := c.o.Clock.NewTicker(period)
	defer t.Stop()
	for {
		if synced, _ := c.cache.state(); synced {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-c.kick:
		case <-t.C():
		}
	}
}

// watchdog stops every cluster of this replica once its Lease has gone
// unrenewed for the renew deadline, whatever the loop is doing (a step
// stuck on a hung connection): the others may take the clusters once the
// declared lease duration has passed since the last renewal, and they
// must have stopped here by then.
func (c *Coordinator) watchdog(stop <-chan struct{}) {
	t := c.o.Clock.NewTicker(period / 2)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C():
		}
		c.fenceIfOverdue()
	}
}

func (c *Coordinator) fenceIfOverdue() {
	if c.hb.renewed.Load() == nil || c.hb.healthy(c.o.Clock.Now()) {
		c.fenced.Store(false)
		return
	}
	if c.fenced.CompareAndSwap(false, true) {
		c.fences.Add(1)
		c.log.Info("sharding: this replica's Lease has not been renewed for the renew deadline; stopping its clusters", "renewDeadline", c.o.RenewDeadline.String())
	}
	c.members.StopAll()
}

// step renews this replica's Lease when due, works out the assignment, and
// brings each cluster this replica has to do with in line with it.
func (c *Coordinator) step(ctx context.Context) {
	if c.wasHealthy && !c.hb.healthy(c.o.Clock.Now()) {
		// Lapsed since the last step (a call that hung), even if the
		// renewal below works.
		c.epoch++
		c.wasHealthy = false
	}
	c.renewIfDue(ctx)
	if f := c.fences.Load(); f != c.seenFences {
		// The watchdog stopped everything: what ran is stopping now, and
		// Disown tells when it has stopped.
		c.seenFences = f
		c.epoch++
		for _, cl := range c.claims {
			cl.running, cl.stopping = false, nil
		}
		clear(c.told)
	}
	now := c.o.Clock.Now()
	own, ok := c.cache.get(c.hb.name)
	c.hb.observe(own, ok, now)
	healthy := c.hb.healthy(now)
	alone := c.hb.check(now)
	if healthy && alone && !c.wasHealthy {
		// Joining, or back from a time without renewals: silence this
		// replica could not have heard tells nothing of the others, and
		// the watch may be as stale as its view.
		c.cache.blind(now)
		for n, h := range c.held {
			h.at = now
			c.held[n] = h
		}
		if c.joined {
			c.watch.restart()
		}
		c.joined = true
	}
	if (!healthy || !alone) && c.wasHealthy {
		c.epoch++
	}
	c.wasHealthy = healthy && alone
	c.restartQuietWatch(healthy, now)
	c.writes.settle()
	c.cache.prune(now, c.o.LeaseDuration)
	snap := c.cache.snapshot()
	run := healthy && alone && !c.leaving

	live := c.peers(snap, now)
	if run {
		live = append(live, c.o.Identity)
	}
	c.remember(snap, now)
	members := c.members.Names()
	names := make([]string, 0, len(members))
	records := make(map[string]any, len(members))
	for _, m := range members {
		names = append(names, m.Name)
		records[m.Name] = m.Record
	}
	slices.Sort(names)
	assigned := Assign(Input{Replicas: live, Names: names, Pins: c.pins(snap, live), LoadFactor: c.loadFactor(snap, live)})
	c.share.Store(shareOf(assigned, c.o.Identity, run))
	c.budget = maxRequestsPerStep
	concerned := c.concerned(names, snap)
	c.renewed(concerned, records)
	for _, name := range concerned {
		_, desired := records[name]
		c.settle(ctx, name, snap, assigned[name], desired, run)
	}
	keepOnly(c.told, concerned)
	keepOnly(c.records, concerned)
	running := 0
	for _, cl := range c.claims {
		if cl.running {
			running++
		}
	}
	c.o.Metrics.Owned(running)
	if c.hb.healthy(c.o.Clock.Now()) && !c.leaving {
		c.forgetReplicas(ctx, snap, now)
		c.collect(ctx, snap, records, now)
	}
	if c.budget <= 0 {
		c.poke() // more to do: go on at once
	}
}

// shareOf is the Share of replica id under assigned: -1 when it may not
// run clusters.
func shareOf(assigned map[string]string, id string, run bool) int64 {
	if !run {
		return -1
	}
	var n int64
	for _, owner := range assigned {
		if owner == id {
			n++
		}
	}
	return n
}

// Share reports how many clusters the replica's last step assigned to it,
// and false until it has joined, or while it may run none (its Lease not
// renewed in time, another process renewing it, leaving). The clusters
// assigned are not all running yet: those another replica still hands
// over, and those starting, are among them.
func (c *Coordinator) Share() (int, bool) {
	n := c.share.Load()
	if n < 0 || !c.hb.healthy(c.o.Clock.Now()) {
		return 0, false
	}
	return int(n), true
}

// keepOnly drops from m the names not in sorted.
func keepOnly[V any](m map[string]V, sorted []string) {
	for name := range m {
		if _, ok := slices.BinarySearch(sorted, name); !ok {
			delete(m, name)
		}
	}
}

// renewed notices the clusters whose record the Members replaced (deleted
// and added again between two steps): the new record was told nothing, so
// it is told afresh who runs it, and told to run if this replica does. The
// old record retired only once its Manager had stopped.
func (c *Coordinator) renewed(concerned []string, records map[string]any) {
	for _, name := range concerned {
		r, ok := records[name]
		if !ok {
			r = absent{}
		}
		prev, seen := c.records[name]
		c.records[name] = r
		if !seen || prev == r {
			continue
		}
		delete(c.told, name)
		if cl := c.claims[name]; cl != nil && cl.running {
			if ok {
				c.told[name] = ownTag
				c.members.Own(name)
			}
		}
	}
}

// remember notes, for each cluster Lease seen held, its version and when
// it was seen so; it forgets those seen neither held nor for a duration.
func (c *Coordinator) remember(snap map[string]entry, now time.Time) {
	for name, e := range snap {
		if e.role == RoleCluster && !e.gone && e.rec.holder != "" {
			c.held[name] = heldMark{holder: e.rec.holder, writer: e.rec.writer, rv: e.lease.ResourceVersion, renew: e.rec.renew, at: now, d: e.declared(c.o.LeaseDuration)}
		}
	}
	for name, h := range c.held {
		if !now.Before(h.at.Add(h.d)) {
			delete(c.held, name)
		}
	}
}

func (c *Coordinator) renewIfDue(ctx context.Context) {
	if c.hb.due(c.o.Clock.Now()) {
		c.hb.renew(ctx)
	}
}

// mayCall reports whether the step may make another request about
// cluster or other replicas' Leases: within its budget, and while this
// replica's own Lease is renewed (on a connection that hangs, every call
// would cost a request timeout).
func (c *Coordinator) mayCall() bool {
	return c.budget > 0 && c.hb.healthy(c.o.Clock.Now())
}

// restartQuietWatch starts the watch over when it has delivered nothing
// for the renew deadline while this replica renews (each renewal is an
// event): a connection that hangs without breaking.
func (c *Coordinator) restartQuietWatch(healthy bool, now time.Time) {
	if synced, last := c.cache.state(); healthy && synced && now.Sub(last) >= c.o.RenewDeadline {
		c.watch.restart()
	}
}

// concerned returns, sorted, the names this replica has to do with: the
// fleet's, those it has claims on, and those whose Lease names it.
func (c *Coordinator) concerned(names []string, snap map[string]entry) []string {
	out := slices.Clone(names)
	for name := range c.claims {
		out = append(out, name)
	}
	for _, e := range snap {
		if e.role == RoleCluster && !e.gone && e.rec.holder == c.o.Identity && e.rec.cluster != "" &&
			e.lease.Name == ClusterLeaseName(c.o.Group, e.rec.cluster) {
			out = append(out, e.rec.cluster)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// replicaEntry returns replica id's Lease as this replica knows it: the
// Lease at id's Lease name, whatever its holderIdentity says now (a hand
// edit of it is a change of record, a sign of life, not a death). A Lease
// that never named id there (made by hand to look like one) is not.
func (c *Coordinator) replicaEntry(id string) (entry, bool) {
	e, ok := c.cache.get(ReplicaLeaseName(c.o.Group, id))
	if !ok || e.role != RoleReplica || e.id != id {
		return entry{}, false
	}
	return e, true
}

// alive reports whether replica id may still run clusters: its Lease
// changed, as this replica saw it, within the duration it declared. A
// Lease deleted meanwhile counts as it was last seen.
func (c *Coordinator) alive(id string, now time.Time) bool {
	e, ok := c.replicaEntry(id)
	return ok && !e.expired(now, c.o.LeaseDuration)
}

// peers returns the other replicas that take clusters: alive, neither
// leaving nor on standby.
func (c *Coordinator) peers(snap map[string]entry, now time.Time) []string {
	var out []string
	for _, e := range snap {
		id := e.id
		if e.role != RoleReplica || e.gone || id == "" || id == c.o.Identity {
			continue
		}
		if !e.expired(now, c.o.LeaseDuration) && e.rec.leaving == "" && e.rec.standby == "" {
			out = append(out, id)
		}
	}
	return out
}

// pins returns the Pins to follow: this replica's, if every other live
// replica follows the same; else none, so that replicas that disagree on
// them (during a rolling update that changes them) still agree on where
// each cluster runs.
func (c *Coordinator) pins(snap map[string]entry, live []string) map[string]string {
	if len(c.o.Pins) == 0 || !c.othersDeclare(snap, live, func(r record) string { return r.pins }, c.o.pins) {
		return nil
	}
	return c.o.Pins
}

// loadFactor returns the load factor to bound loads by: this replica's, if
// every other live replica declares the same; else DefaultLoadFactor, so
// that replicas that differ on it (during a rolling update that changes
// it) still agree on where each cluster runs.
func (c *Coordinator) loadFactor(snap map[string]entry, live []string) float64 {
	if !c.othersDeclare(snap, live, func(r record) string { return r.loadFactor }, c.o.loadFactor) {
		return DefaultLoadFactor
	}
	return c.o.LoadFactor
}

// othersDeclare reports whether every other live replica's Lease is in
// snap and declares, by field, what this replica does (want), or nothing:
// a replica of a release before the setting declares none, and agrees.
func (c *Coordinator) othersDeclare(snap map[string]entry, live []string, field func(record) string, want string) bool {
	for _, id := range live {
		if id == c.o.Identity {
			continue
		}
		e, ok := snap[ReplicaLeaseName(c.o.Group, id)]
		if !ok {
			return false
		}
		if v := field(e.rec); v != "" && v != want {
			return false
		}
	}
	return true
}

// confirmAlive reads replica id's Lease from the API server before this
// replica takes a cluster id held: a view that lags must not make a live
// replica look dead. Any doubt counts as alive.
func (c *Coordinator) confirmAlive(ctx context.Context, id string) bool {
	if !c.refresh(ctx, ReplicaLeaseName(c.o.Group, id)) {
		return true
	}
	return c.alive(id, c.o.Clock.Now())
}

// forgetReplicas deletes the Leases of replicas silent for their declared
// duration. Left behind, such a Lease would count as live for a lease
// duration to every replica that starts later and first sees it then. The
// precondition spares a Lease renewed meanwhile.
func (c *Coordinator) forgetReplicas(ctx context.Context, snap map[string]entry, now time.Time) {
	for name, e := range snap {
		if !c.mayCall() {
			return
		}
		if e.role != RoleReplica || e.gone || e.id == c.o.Identity || name == c.hb.name || !e.expired(now, c.o.LeaseDuration) {
			continue
		}
		if c.delete(ctx, name, e) {
			c.log.Info("sharding: removed the Lease of a replica that went silent", "lease", name, "holder", e.id)
		}
	}
}

// collect deletes the Leases of clusters that left the fleet (fleet holds
// the names of those that did not, as keys) and that no live replica holds.
func (c *Coordinator) collect(ctx context.Context, snap map[string]entry, fleet map[string]any, now time.Time) {
	// A cluster's Lease is known by its name: an annotation may lie.
	keep := make(map[string]bool, len(fleet)+len(c.claims))
	for n := range fleet {
		keep[ClusterLeaseName(c.o.Group, n)] = true
	}
	for n := range c.claims {
		keep[ClusterLeaseName(c.o.Group, n)] = true
	}
	for name, e := range snap {
		if !c.mayCall() {
			return
		}
		if e.role != RoleCluster || e.gone || keep[name] {
			continue
		}
		if e.rec.holder == c.o.Identity {
			// Released or deleted by settle when its annotation names the
			// cluster; else, once no claim of this replica's is on it, as
			// settle would.
			if e.lease.Name == ClusterLeaseName(c.o.Group, e.rec.cluster) ||
				e.rec.writer != c.o.Writer && (!c.hb.alone(now) || !e.expired(now, c.o.LeaseDuration)) {
				continue
			}
			c.delete(ctx, name, e)
			continue
		}
		// A replica whose fleet holds the cluster (this one's may lag
		// behind, or run ahead of, the source) takes a released Lease, or
		// one whose holder died, as soon as the rules let it; a Lease it
		// saw held and then finds deleted it takes only after the
		// duration its holder declared (unheld). So a Lease is collected
		// only once nobody took it for that long: unchanged for the
		// duration it declares, and its holder dead for its own too. A
		// holder that looks dead is confirmed so by a read first, as for
		// a take: a view that lags (its watch failing) must not make a
		// live replica's claim look abandoned.
		if !e.expired(now, c.o.LeaseDuration) ||
			e.rec.holder != "" && (c.lately(e.rec.holder, now) || c.confirmAlive(ctx, e.rec.holder)) {
			continue
		}
		c.delete(ctx, name, e)
	}
}

// lately reports whether replica id may run clusters, or could within the
// duration it declared: the replicas that take its clusters once it is
// dead may not have yet.
func (c *Coordinator) lately(id string, now time.Time) bool {
	e, ok := c.replicaEntry(id)
	return ok && now.Before(e.until(c.o.LeaseDuration).Add(e.declared(c.o.LeaseDuration)))
}

// delete deletes a Lease at the version e shows.
func (c *Coordinator) delete(ctx context.Context, name string, e entry) bool {
	c.budget--
	rctx, cancel := context.WithTimeout(ctx, c.o.requestTimeout())
	defer cancel()
	rv := e.lease.ResourceVersion
	err := c.leases.Delete(rctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	switch {
	case err == nil, apierrors.IsNotFound(err):
		c.cache.missing(name)
		return err == nil
	case apierrors.IsConflict(err):
		c.refresh(ctx, name)
	default:
		c.writes.failed(err, "lease", name)
	}
	return false
}

// refresh reads a Lease from the API server into the cache; read is false
// when the API server could not say (the cache then keeps what it had).
func (c *Coordinator) refresh(ctx context.Context, name string) (read bool) {
	c.budget--
	rctx, cancel := context.WithTimeout(ctx, c.o.requestTimeout())
	defer cancel()
	sent := c.o.Clock.Now()
	l, err := c.leases.Get(rctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		c.cache.missing(name)
	case err != nil:
		return false
	default:
		c.cache.fresh(l, sent)
	}
	return true
}

// leave hands this replica's clusters over: its Lease says it is leaving
// (the others reassign at once), it stops and releases every cluster it
// holds, and deletes its Lease. A replica that cannot write stops its
// clusters and leaves the rest to its Lease's expiry.
func (c *Coordinator) leave() {
	c.startLeaving()
	deadline := c.o.Clock.Now().Add(c.o.LeaseDuration)
	t := c.o.Clock.NewTicker(period)
	defer t.Stop()
	for {
		c.step(context.Background())
		if c.handedOver() || !c.o.Clock.Now().Before(deadline) {
			break
		}
		select {
		case <-c.kick:
		case <-t.C():
		}
	}
	c.finishLeaving(context.Background())
}

func (c *Coordinator) startLeaving() { c.leaving, c.hb.leaving = true, true }

func (c *Coordinator) finishLeaving(ctx context.Context) {
	c.o.Metrics.Owned(0)
	if c.hb.healthy(c.o.Clock.Now()) {
		c.hb.remove(ctx)
	}
	c.log.Info("sharding: left")
}

// handedOver reports whether nothing runs here any more and no Lease of
// this replica's claims is left to release (or it cannot write).
func (c *Coordinator) handedOver() bool {
	for _, cl := range c.claims {
		if cl.running || cl.stopping != nil {
			return false
		}
	}
	if !c.hb.healthy(c.o.Clock.Now()) {
		return true
	}
	for name, cl := range c.claims {
		if e, ok := c.cache.get(ClusterLeaseName(c.o.Group, name)); cl.pending || ok && c.namesMe(e) {
			return false
		}
	}
	return true
}
