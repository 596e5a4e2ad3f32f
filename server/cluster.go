package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/mccr-dev/mccr/config"
)

// Locking. These locks exist, always taken in this order and never held
// across anything that can wait:
//
//  0. nameClaims.mu: which watcher feeds each name. Watch applies its
//     decisions (Add, Update, Delete, none of which waits) under it.
//  1. cluster.mu, one per cluster name: its desired config, its live
//     generation, its status, route and metric series.
//  2. run.mu: whether the fleet may start generations now.
//  3. registry.mu (the Server's lock), the router's lock, the fleet
//     feed's lock and memberOrder.viewMu (where a record publishes its
//     status for Statuses): leaves. Nothing is called while one of them is
//     held. memberOrder.mu, Statuses' own, is held while looking records
//     up in the registry; no record waits for it (one may take it with
//     TryLock under viewMu, to catch up with the records marked stale).
//
// No user code (reconciler setups, IndexField, discovery, anything that may
// touch the network) runs under any of them: generations run setups in
// their own goroutine with no lock held, and every wait (a Manager
// stopping, caches syncing) happens after the locks are released.

// cluster owns one cluster name: the config it should run (desired), the
// one generation allowed to run or stop at any instant, the name's route in
// the fan-out client, its status and its metric series. A new generation
// starts only after the previous one has stopped, so at most one Manager
// runs for a name, whatever mix of Add, Update, Delete and leadership
// changes arrives.
type cluster struct {
	name   string
	env    *env
	reg    *registry
	log    logr.Logger
	series clusterSeries

	// pub is the status as last published: Status and Statuses read it
	// without taking mu (see publishLocked). Nil while the name is not
	// desired.
	pub atomic.Pointer[published]
	// slot is the record's place in the view of the registry's
	// memberOrder, and stale (guarded by the order's viewMu) says the view
	// may lack its last published status.
	slot  atomic.Int64
	stale bool

	mu      sync.Mutex
	desired *config.NamedConfig // nil once deleted
	fp      fingerprints
	gen     *generation // running or stopping; nil when none
	run     *run        // the fleet's current run; nil while the fleet does not run
	// status is what publishLocked publishes. Its map and slices are
	// replaced, never changed in place, and never handed out: shared
	// holds the copies of them that Statuses hands out.
	status ClusterStatus
	// errorAt is when status.LastError was recorded.
	errorAt time.Time
	shared  statusParts
	mgr     manager.Manager // the live generation's Manager while Ready
	dead    bool            // removed from the registry; every operation retries
	// local says this replica may run the name: always without sharding;
	// with it, while this replica holds the cluster's lease (own/disown).
	local bool
}

func newCluster(name string, e *env, reg *registry) *cluster {
	return &cluster{name: name, env: e, reg: reg, log: e.log.WithValues("cluster", name), series: clusterSeries{name: name}, local: !e.sharded}
}

// errDead tells the Server to look the name up again: the cluster it had
// left the registry meanwhile.
var errDead = fmt.Errorf("cluster record retired")

// fingerprints are a desired config's digests: all of it, what decides
// how the cluster is reached (a change to the rest, its Properties, needs
// no new Manager), and that without the credentials a running member
// takes in place (a change to those alone needs no new Manager either).
type fingerprints struct{ all, reach, conn string }

func fingerprintsOf(nc *config.NamedConfig) fingerprints {
	return fingerprints{all: nc.Fingerprint(), reach: nc.ReachFingerprint(), conn: nc.ConnectionFingerprint()}
}

// updated says what an Update did.
type updated int

const (
	updatedNothing     updated = iota // the same config again
	updatedProperties                 // Properties alone: the member runs on
	updatedCredentials                // credentials alone, swapped into the running member
	updatedRestart                    // the member restarts on the new config
)

// describeLocked sets what the status tells of the desired config.
func (c *cluster) describeLocked(nc *config.NamedConfig) {
	c.status.Source = nc.Source
	c.status.Properties = maps.Clone(nc.Properties)
	c.shared.properties = maps.Clone(nc.Properties)
}

// add sets the config of a cluster that is not desired yet (new, or
// deleted while its last generation still stops). The same config again is
// a no-op; another one is ErrClusterExists.
func (c *cluster) add(nc *config.NamedConfig, fp fingerprints) error {
	c.mu.Lock()
	defer c.publishUnlock()
	switch {
	case c.dead:
		return errDead
	case c.desired != nil && c.fp == fp:
		return nil
	case c.desired != nil:
		return fmt.Errorf("cluster %q: %w", c.name, ErrClusterExists)
	}
	c.desired, c.fp = nc, fp
	c.series.init()
	// Known from now on; routable once a generation runs. A generation
	// still stopping from before a Delete has no route any more.
	if c.local {
		c.env.routes.Set(c.name, nil, false)
	} else {
		c.env.routes.SetElsewhere(c.name, c.status.Owner)
	}
	if c.gen == nil {
		c.status = ClusterStatus{Name: c.name, Phase: PhasePending, Since: time.Now()}
	} else {
		// Added again while the deleted config's Manager still stops: this
		// is another member, whose failures, restarts, errors and probes
		// are its own (its series started afresh above). The phase says
		// the old Manager stops; the kinds are that Manager's until it has.
		old := c.status
		c.status = ClusterStatus{Name: c.name, Owner: old.Owner, Phase: old.Phase, Since: old.Since, WaitingFor: old.WaitingFor, Unserved: old.Unserved}
		c.errorAt = time.Time{}
	}
	c.describeLocked(nc)
	c.series.phase(c.status.Phase)
	c.ensureLocked()
	return nil
}

// update replaces the desired config. When the cluster is reached
// differently it stops the generation running the old config
// (updatedRestart); the returned channel closes once it has stopped (nil
// when nothing runs). The next generation starts from ensureLocked when it
// has. A change of Properties alone keeps the running generation, and so
// does a change of credentials alone (a rotated token, the connection
// otherwise the same): the generation takes them in place, its Manager,
// caches and watches untouched (see swapLocked).
func (c *cluster) update(nc *config.NamedConfig, fp fingerprints) (stopped <-chan struct{}, how updated, err error) {
	c.mu.Lock()
	defer c.publishUnlock()
	if err := c.knownLocked(); err != nil || c.fp.all == fp.all {
		return nil, updatedNothing, err
	}
	how = updatedProperties
	switch {
	case c.fp.reach == fp.reach:
	case c.fp.conn == fp.conn && c.swapLocked(nc):
		how = updatedCredentials
	default:
		how = updatedRestart
	}
	c.desired, c.fp = nc, fp
	c.describeLocked(nc)
	if how != updatedRestart {
		return nil, how, nil
	}
	// The next generation runs another config: its restarts and retries
	// are counted afresh (ClusterStatus.Restarts).
	c.status.Restarts, c.status.NextRetry = 0, time.Time{}
	if c.gen == nil {
		c.ensureLocked()
		return nil, how, nil
	}
	// Calls aimed at the cluster stop reaching the old Manager first, so
	// that those waiting on it end with ErrClusterNotReady.
	if c.local {
		c.env.routes.Set(c.name, nil, false)
	}
	c.gen.stop()
	c.setPhaseLocked(c.gen, PhaseStopping, nil)
	return c.gen.done, how, nil
}

// swapLocked gives the live generation the credentials of nc, whose
// connection is otherwise the one it runs on; false when it cannot take
// them, and must restart: none runs, or it stops, or it failed and waits
// to retry (restarting it now starts on the new credentials at once,
// instead of after its backoff), or its credentials come from an exec
// plugin or auth provider, or client-go would refuse the new ones.
func (c *cluster) swapLocked(nc *config.NamedConfig) bool {
	if c.gen == nil || c.gen.stopping() || c.status.Phase == PhaseFailed {
		return false
	}
	return c.gen.creds.Set(nc.Config) == nil
}

// remove forgets the desired config and stops the live generation; the
// returned channel closes once it has stopped (nil when nothing ran).
func (c *cluster) remove() (<-chan struct{}, error) {
	c.mu.Lock()
	defer c.publishUnlock()
	if err := c.knownLocked(); err != nil {
		return nil, err
	}
	c.desired, c.fp = nil, fingerprints{}
	// Its series go at once, as it leaves Status: a Manager that takes long
	// to stop (past StopTimeout, or a watcher's Delete, which does not wait)
	// is no member any more, and what it reports as it ends is not news.
	c.series.forget()
	c.publishLocked() // gone from Status before it is told as left
	if c.gen == nil {
		c.retireLocked()
		c.env.feed.publish(memberState{name: c.name, left: true})
		return nil, nil
	}
	// Gone from the fleet at once: calls waiting on the cluster end with
	// ErrClusterNotFound while its Manager stops. Told as left only then,
	// so that a subscriber finds it gone from the fan-out client.
	c.env.routes.Remove(c.name)
	c.env.feed.publish(memberState{name: c.name, left: true})
	c.gen.stop()
	c.setPhaseLocked(c.gen, PhaseStopping, nil)
	return c.gen.done, nil
}

// knownLocked is errDead for a retired record (look the name up again) and
// ErrClusterNotFound for a name that is not desired.
func (c *cluster) knownLocked() error {
	switch {
	case c.dead:
		return errDead
	case c.desired == nil:
		return fmt.Errorf("cluster %q: %w", c.name, ErrClusterNotFound)
	}
	return nil
}

// start lets the cluster run generations under r (the fleet runs).
func (c *cluster) start(r *run) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return
	}
	c.run = r
	c.ensureLocked()
}

// ensureLocked starts a generation for the desired config when none is
// live and the fleet runs.
func (c *cluster) ensureLocked() {
	if c.gen != nil || c.desired == nil || c.run == nil || !c.local {
		return
	}
	g := newGeneration(c, c.desired)
	if !c.run.spawn(g) {
		return // the run ended: the host stops or no longer leads
	}
	c.gen = g
}

// exited is the last thing a generation does, once its Manager has
// stopped: the name may now run the next generation, or be forgotten.
func (c *cluster) exited(g *generation) {
	c.mu.Lock()
	defer c.publishUnlock()
	if c.gen != g {
		return
	}
	c.gen = nil
	if c.desired == nil {
		c.retireLocked()
		return
	}
	if !c.local {
		c.setPhaseLocked(nil, PhaseElsewhere, nil)
		return
	}
	c.setPhaseLocked(nil, PhaseStopped, nil)
	c.ensureLocked()
}

// own lets this replica run the cluster (sharding: it holds the cluster's
// lease now).
func (c *cluster) own() {
	c.mu.Lock()
	defer c.publishUnlock()
	if c.dead || c.local {
		return
	}
	c.local = true
	c.status.Owner = ""
	if c.desired != nil {
		c.env.routes.Set(c.name, nil, false)
		c.setPhaseLocked(nil, PhasePending, nil)
	}
	c.ensureLocked()
}

// disown stops the cluster on this replica: owner (another replica, or ""
// for none yet) is to run it. The returned channel closes once no Manager
// of the name runs here any more.
func (c *cluster) disown(owner string) <-chan struct{} {
	c.mu.Lock()
	defer c.publishUnlock()
	c.local = false
	c.status.Owner = owner
	if c.desired != nil {
		c.env.routes.SetElsewhere(c.name, owner)
	}
	if c.gen == nil {
		if c.desired != nil {
			c.setPhaseLocked(nil, PhaseElsewhere, nil)
		}
		return closedChan
	}
	c.gen.stop()
	c.setPhaseLocked(c.gen, PhaseStopping, nil)
	return c.gen.done
}

// disownIfLocal stops the cluster on this replica if it runs here, for a
// replica that lost its Lease: no owner is known.
func (c *cluster) disownIfLocal() {
	c.mu.Lock()
	local := c.local
	c.mu.Unlock()
	if local {
		c.disown("")
	}
}

var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// retireLocked forgets the name: route, metric series, registry entry. The
// cluster is dead from now on; the next Add of the name makes a new one.
func (c *cluster) retireLocked() {
	c.dead = true
	c.env.routes.Remove(c.name)
	c.series.forget()
	c.reg.remove(c)
}

// kick tells the live generation that reconciler setups were added.
func (c *cluster) kick() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != nil {
		c.gen.kick()
	}
}

// known reports whether the name is part of the fleet (desired).
func (c *cluster) known() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.desired != nil
}

// Publishing. Status and Statuses read a member's status without its lock:
// a fleet's worth of locks, copies of maps and questions to Managers on
// every call would cost milliseconds at thousands of members. Instead the
// record publishes its status, a value nobody changes once published,
// whenever it changes: every method that changes status (or desired) ends
// with publishUnlock, and a change that an event announces is published
// before the event (setPhaseLocked, remove). What comes from the member's
// Manager (WaitingFor, Unserved) is read when the Manager says it changed
// (followKindsLocked), not on every call.

// published is a member's status as its record published it. Nothing
// changes it afterwards, and every reader shares it.
type published struct {
	// status is the status as Statuses hands it out: its map and slices
	// are the record's shared copies, which every caller of Statuses gets
	// (a copy of each per member and call would cost more than the rest of
	// a fleet-wide call).
	status ClusterStatus
	// own are the record's own map and slices, never handed out: Status
	// copies them, so that nothing a caller does to what Statuses shared
	// reaches Status, ClusterProperties or the record.
	own statusParts
}

// statusParts are the map and slices of a ClusterStatus.
type statusParts struct {
	properties map[string]string
	waitingFor []string
	unserved   []UnservedKind
}

// copied is the status for Status: its map and slices the caller's own.
func (p *published) copied() ClusterStatus {
	st := p.status
	st.Properties = maps.Clone(p.own.properties)
	st.WaitingFor = slices.Clone(p.own.waitingFor)
	st.Unserved = slices.Clone(p.own.unserved)
	return st
}

// published returns the status as last published, nil when the name is
// not desired.
func (c *cluster) published() *published { return c.pub.Load() }

// publishLocked publishes the status as it stands.
func (c *cluster) publishLocked() {
	var p *published
	if c.desired != nil {
		p = &published{status: c.status, own: statusParts{c.status.Properties, c.status.WaitingFor, c.status.Unserved}}
		p.status.Properties, p.status.WaitingFor, p.status.Unserved = c.shared.properties, c.shared.waitingFor, c.shared.unserved
	}
	c.reg.order.put(c, p)
}

// publishUnlock publishes the status and releases the lock.
func (c *cluster) publishUnlock() {
	c.publishLocked()
	c.mu.Unlock()
}

// followKindsLocked reads what the live Manager (c.mgr, nil when none)
// reports of the kinds it does not serve, and has it read again each time
// the Manager says that changed. A Manager replaced or gone is told to stop
// saying so, and its late word is ignored.
func (c *cluster) followKindsLocked(old manager.Manager) {
	if old != c.mgr {
		if k, ok := old.(kindsReporter); ok {
			k.OnKindsChanged(nil)
		}
		if k, ok := c.mgr.(kindsReporter); ok {
			mgr := c.mgr
			k.OnKindsChanged(func() { c.kindsChanged(mgr) })
		}
	}
	c.readKindsLocked()
}

// kindsChanged is told by mgr that its reports of kinds changed.
func (c *cluster) kindsChanged(mgr manager.Manager) {
	c.mu.Lock()
	if c.mgr != mgr {
		c.mu.Unlock()
		return
	}
	defer c.publishUnlock()
	c.readKindsLocked()
}

func (c *cluster) readKindsLocked() {
	c.status.WaitingFor, c.status.Unserved = nil, nil
	if k, ok := c.mgr.(kindsReporter); ok {
		c.status.WaitingFor = k.WaitingKinds()
		c.status.Unserved = unservedKinds(k.UnservedKinds())
	}
	c.shared.waitingFor = slices.Clone(c.status.WaitingFor)
	c.shared.unserved = slices.Clone(c.status.Unserved)
}

// The methods below are how a generation reports; each ignores a
// generation that is no longer the live one (g == nil means the cluster
// itself).

func (c *cluster) setPhase(g *generation, p Phase, err error) {
	c.mu.Lock()
	defer c.publishUnlock()
	c.setPhaseLocked(g, p, err)
}

func (c *cluster) setPhaseLocked(g *generation, p Phase, err error) {
	if g != nil && g != c.gen {
		return
	}
	if c.gen != nil && c.gen.stopping() && p != PhaseStopping && p != PhaseStopped {
		return // a generation winding down says nothing new
	}
	changed := c.status.Phase != p
	if changed {
		c.status.Phase, c.status.Since = p, time.Now()
	}
	if err != nil {
		c.status.LastError, c.errorAt = c.redactLocked(g, err), time.Now()
	}
	c.series.phase(p)
	c.publishLocked() // the event below finds it in Status
	// A deleted cluster was told as left; its last phases are not news.
	if changed && c.desired != nil {
		st := memberState{name: c.name, phase: p, err: c.status.LastError}
		if p == PhaseReady || p == PhaseUnreachable {
			st.mgr = c.mgr
		}
		c.env.feed.publish(st)
	}
}

// route points the fan-out client at cl (nil: no running Manager) for
// calls aimed at the cluster; ready adds it to fleet-wide readiness.
func (c *cluster) route(g *generation, cl crclient.Client, ready bool) {
	c.mu.Lock()
	defer c.publishUnlock()
	if g != c.gen || cl != nil && g.stopping() {
		return
	}
	if cl == nil && c.mgr != nil {
		old := c.mgr
		c.mgr = nil
		c.followKindsLocked(old)
	}
	switch {
	case c.desired == nil:
	case !c.local:
		c.env.routes.SetElsewhere(c.name, c.status.Owner)
	default:
		c.env.routes.Set(c.name, cl, ready)
	}
}

func (c *cluster) ready(g *generation, mgr manager.Manager, took time.Duration) {
	c.mu.Lock()
	defer c.publishUnlock()
	if !c.liveLocked(g) {
		return
	}
	c.status.LastError, c.status.NextRetry = nil, time.Time{}
	c.status.TimeToReady = took
	old := c.mgr
	c.mgr = mgr // before the phase: the feed tells Ready with the Manager
	c.followKindsLocked(old)
	// The route first: a subscriber told Ready finds the member served.
	c.env.routes.Set(c.name, mgr.GetClient(), true)
	c.setPhaseLocked(g, PhaseReady, nil)
	c.series.timeToReady(took)
}

func (c *cluster) unreachable(g *generation, err error) {
	c.mu.Lock()
	defer c.publishUnlock()
	if !c.liveLocked(g) {
		return
	}
	// The route first: a subscriber told Unreachable reads it so.
	c.env.routes.SetUnreachable(c.name, err)
	c.setPhaseLocked(g, PhaseUnreachable, err)
}

// recovered makes an Unreachable member Ready again as it runs: its API
// server answers, and nothing of it broke meanwhile.
func (c *cluster) recovered(g *generation) {
	c.mu.Lock()
	defer c.publishUnlock()
	if !c.liveLocked(g) || c.status.Phase != PhaseUnreachable {
		return
	}
	// The route first, as for Unreachable.
	c.env.routes.SetUnreachable(c.name, nil)
	c.setPhaseLocked(g, PhaseReady, nil)
}

func (c *cluster) failed(g *generation, err error, retryIn time.Duration) {
	c.mu.Lock()
	defer c.publishUnlock()
	if !c.liveLocked(g) {
		return
	}
	c.status.NextRetry = time.Now().Add(retryIn)
	c.status.Failures++
	// Counted before the status is published: whoever sees the failure in
	// Status finds it in the metrics too.
	c.series.failure(errors.Is(err, ErrSetupFailed))
	c.setPhaseLocked(g, PhaseFailed, err)
}

func (c *cluster) restarted(g *generation) {
	c.mu.Lock()
	defer c.publishUnlock()
	if !c.liveLocked(g) {
		return // an Update may have counted afresh meanwhile
	}
	c.status.Restarts++
	c.series.restart()
}

// liveLocked reports whether g is the record's generation (nil: none)
// and is not stopping: only then is what it reports news.
func (c *cluster) liveLocked(g *generation) bool {
	return g == c.gen && (g == nil || !g.stopping())
}

// recordError keeps err as the last error without changing the phase.
func (c *cluster) recordError(g *generation, err error) {
	c.mu.Lock()
	defer c.publishUnlock()
	if c.liveLocked(g) {
		c.status.LastError, c.errorAt = c.redactLocked(g, err), time.Now()
	}
}

// redactLocked redacts an error of the member before Status keeps it: as
// its generation g redacts (generation.redact), or, with none, against the
// desired config's credentials.
func (c *cluster) redactLocked(g *generation, err error) error {
	switch {
	case g != nil:
		return g.redact(err)
	case c.desired != nil:
		return config.RedactErrorFor(err, c.desired.Config)
	}
	return config.RedactErrorWith(err)
}

// manager returns the live generation's Manager while it is Ready (or
// Unreachable, still serving its caches), and not once it was asked to
// stop (Delete, Update, the end of the fleet's run), as the fan-out client
// no longer routes to it then.
func (c *cluster) manager() manager.Manager {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == nil || c.gen.stopping() {
		return nil
	}
	return c.mgr
}

// running reports whether a generation of the cluster runs or stops.
func (c *cluster) running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen != nil
}

// runEnded tells a cluster that the fleet's run ended (the Server stops, or
// no longer leads): its live generation, if any, is stopping now.
func (c *cluster) runEnded() {
	c.mu.Lock()
	defer c.publishUnlock()
	if c.gen == nil {
		return
	}
	c.gen.stop() // its context ends with the run's; this says so at once
	// Out of fleet-wide readiness, as Stopping; calls still reach it
	// while it stops, as a stopping controller-runtime Manager's do.
	if c.mgr != nil && c.local && c.desired != nil {
		c.env.routes.Set(c.name, c.mgr.GetClient(), false)
	}
	c.setPhaseLocked(c.gen, PhaseStopping, nil)
}

// lastErrorSince returns the last error if it was recorded at since or
// later (during the attempt that began then), else def: an earlier
// attempt's error is no cause of this one's failure.
func (c *cluster) lastErrorSince(since time.Time, def error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.status.LastError != nil && !c.errorAt.Before(since) {
		return c.status.LastError
	}
	return def
}

// run is one period during which members may run: while the host Manager
// runs (warm standbys) or while it leads (Options.ColdStandby). Generations
// start under its context, and it ends only after every one of them has
// stopped, so the lease is never released while a member still runs.
type run struct {
	ctx context.Context
	// elected, when set, holds back the members' controllers until the
	// host leads (host.Elected()); their caches run before.
	elected <-chan struct{}

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// spawn runs g under the run's context, unless the run has ended.
func (r *run) spawn(g *generation) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.ctx.Err() != nil {
		return false
	}
	g.begin(r.ctx, r.elected)
	r.wg.Go(g.run)
	return true
}

// close refuses new generations and waits for the running ones.
func (r *run) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.wg.Wait()
}

// registry maps names to clusters. Its lock is the Server's lock: a leaf.
type registry struct {
	mu       sync.Mutex
	clusters map[string]*cluster
	// order keeps the records' published statuses in the order of their
	// names, for Statuses.
	order memberOrder
}

func (r *registry) get(name string) *cluster {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clusters[name]
}

func (r *registry) getOrCreate(name string, create func() *cluster) *cluster {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.clusters[name]; ok {
		return c
	}
	if r.clusters == nil {
		r.clusters = map[string]*cluster{}
	}
	c := create()
	r.clusters[name] = c
	return c
}

func (r *registry) remove(c *cluster) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.clusters[c.name] == c {
		delete(r.clusters, c.name)
	}
}

func (r *registry) all() []*cluster {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*cluster, 0, len(r.clusters))
	for _, c := range r.clusters {
		out = append(out, c)
	}
	return out
}
