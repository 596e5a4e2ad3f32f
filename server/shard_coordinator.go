package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/mccr-dev/mccr/internal/shard"
)

// Labels and annotations of the sharding Leases.
const (
	shardGroupLabel   = "mccr.dev/shard-group"
	shardRoleLabel    = "mccr.dev/shard-role"
	shardClusterAnno  = "mccr.dev/cluster"
	shardLeavingAnno  = "mccr.dev/leaving"
	shardRoleReplica  = "replica"
	shardRoleCluster  = "cluster"
	coordinatorPeriod = 250 * time.Millisecond
	// maxWritesPerStep bounds the Lease writes of one step, so that a step
	// stays short and the replica's own Lease is renewed in time.
	maxWritesPerStep = 32
)

// coordinator is a sharded Server's part in the replicas' agreement: it
// heartbeats this replica's Lease, works out which clusters are this
// replica's, takes and releases their Leases, and tells the cluster records
// (own, disown) — which never call back. It runs as a host runnable that
// needs no leader election; its state belongs to its one goroutine.
type coordinator struct {
	o        ShardingOptions
	leases   coordclient.LeaseInterface
	clusters *registry
	log      logr.Logger
	kick     chan struct{}
	metrics  shardSeries

	informer toolscache.SharedIndexInformer
	// lastRenew is when this replica's Lease was last renewed (unix nanos);
	// the watchdog reads it too.
	lastRenew atomic.Int64
	// Loop state.
	created bool      // this replica's Lease was created (or found) once
	joined  time.Time // when the informer had synced
	leaving bool
	seen    map[string]observedLease // replica Lease name → when its renewal last changed, locally
	held    map[string]*heldCluster  // names whose Lease this replica holds
}

type observedLease struct {
	renew time.Time
	at    time.Time
	// deleting is the resourceVersion this replica tried to delete the
	// Lease at, once it expired.
	deleting string
}

// heldCluster is a cluster whose Lease this replica holds; stopped is set
// once it was disowned, and closes when its Manager has stopped here.
type heldCluster struct {
	stopped  <-chan struct{}
	watching bool // a goroutine pokes the loop when stopped closes
}

func newCoordinator(cfg *rest.Config, o ShardingOptions, clusters *registry, log logr.Logger) (*coordinator, error) {
	// A limiter of its own: the host's controllers must never hold up this
	// replica's heartbeat.
	cfg = rest.CopyConfig(cfg)
	cfg.RateLimiter, cfg.QPS, cfg.Burst = nil, 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("sharding: %w", err)
	}
	c := &coordinator{
		o:        o,
		leases:   cs.CoordinationV1().Leases(o.Namespace),
		clusters: clusters,
		log:      log.WithName("sharding").WithValues("replica", o.Identity),
		kick:     make(chan struct{}, 1),
		metrics:  shardSeries{replica: o.Identity},
		seen:     map[string]observedLease{},
		held:     map[string]*heldCluster{},
	}
	selector := shardGroupLabel + "=" + dnsLabel(o.Group)
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = selector
			return c.leases.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			return c.leases.Watch(ctx, opts)
		},
	}
	c.informer = toolscache.NewSharedIndexInformer(lw, &coordinationv1.Lease{}, 0, toolscache.Indexers{})
	if _, err := c.informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.poke() },
		UpdateFunc: func(any, any) { c.poke() },
		DeleteFunc: func(any) { c.poke() },
	}); err != nil {
		return nil, fmt.Errorf("sharding: %w", err)
	}
	return c, nil
}

func (c *coordinator) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *coordinator) replicaLeaseName(id string) string {
	return dnsLabel(c.o.Group) + "-r-" + dnsLabel(id) + "-" + shortHash(id, 8)
}

func (c *coordinator) clusterLeaseName(name string) string {
	return dnsLabel(c.o.Group) + "-c-" + shortHash(name, 20)
}

func shortHash(s string, n int) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])[:n]
}

func (c *coordinator) labels(role string) map[string]string {
	return map[string]string{shardGroupLabel: dnsLabel(c.o.Group), shardRoleLabel: role}
}

// Start coordinates until ctx ends, then hands this replica's clusters
// over and removes its Lease.
func (c *coordinator) Start(ctx context.Context) error {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		close(stop)
		wg.Wait()
	}()
	wg.Go(func() { c.informer.Run(stop) })
	if !toolscache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced) {
		return nil
	}
	c.joined = time.Now()
	c.log.Info("sharding: joining", "namespace", c.o.Namespace, "group", c.o.Group)
	wg.Go(func() { c.watchdog(stop) })
	t := time.NewTicker(coordinatorPeriod)
	defer t.Stop()
	for ctx.Err() == nil {
		c.step(ctx)
		select {
		case <-ctx.Done():
		case <-c.kick:
		case <-t.C:
		}
	}
	c.leave()
	return nil
}

// healthy reports whether this replica's Lease was renewed within the
// renew deadline: only then may it run clusters.
func (c *coordinator) healthy() bool {
	last := c.lastRenew.Load()
	return last != 0 && time.Since(time.Unix(0, last)) < c.o.RenewDeadline
}

// watchdog stops every cluster of this replica once its Lease has gone
// unrenewed for the renew deadline, whatever the loop is doing (a step
// stuck on a slow API server): the other replicas take the clusters a
// lease duration after the last renewal, and they must have stopped here
// by then.
func (c *coordinator) watchdog(stop <-chan struct{}) {
	t := time.NewTicker(coordinatorPeriod / 2)
	defer t.Stop()
	fenced := false
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if c.healthy() || c.lastRenew.Load() == 0 {
			fenced = false
			continue
		}
		if !fenced {
			c.log.Info("sharding: this replica's Lease is not renewed; stopping its clusters")
			fenced = true
		}
		for _, cl := range c.clusters.all() {
			cl.disownIfLocal()
		}
	}
}

// step renews this replica's Lease when due, then brings the clusters it
// holds in line with the assignment.
func (c *coordinator) step(ctx context.Context) {
	c.renewIfDue(ctx)
	healthy := c.healthy()
	c.fence(healthy)
	replicas, expired := c.observe()
	if healthy {
		for _, l := range expired {
			c.forget(ctx, l)
		}
	}
	names := c.desiredNames()
	if healthy && !c.leaving {
		replicas = append(replicas, c.o.Identity)
	}
	assigned := shard.Assign(shard.Input{Replicas: replicas, Names: names, Pins: c.o.Pins, LoadFactor: c.o.LoadFactor})
	// Writes end with the renew deadline: past it the replica may not take
	// anything, and must renew first.
	sctx, cancel := context.WithDeadline(ctx, time.Unix(0, c.lastRenew.Load()).Add(c.o.RenewDeadline))
	defer cancel()
	writes := 0
	// Let go of what is no longer ours first: a replica that joins takes
	// its share only once the old owners released it.
	for name, h := range c.held {
		if assigned[name] == c.o.Identity {
			// Ours (again): run it, even if it was being let go.
			if healthy {
				h.stopped, h.watching = nil, false
				if cl := c.clusters.get(name); cl != nil {
					cl.own()
				}
			}
			continue
		}
		if c.release(sctx, name, h, assigned[name], healthy) {
			writes++
		}
	}
	for _, name := range names {
		owner := assigned[name]
		if owner == c.o.Identity {
			if _, ok := c.held[name]; !ok && writes < maxWritesPerStep && sctx.Err() == nil {
				c.renewIfDue(ctx)
				if c.acquire(sctx, name) {
					writes++
				}
			}
			continue
		}
		if _, ok := c.held[name]; ok {
			continue
		}
		if cl := c.clusters.get(name); cl != nil {
			cl.disown(owner)
		}
	}
	if healthy && writes < maxWritesPerStep {
		c.collect(sctx, names, maxWritesPerStep-writes)
	}
	c.metrics.owned(len(c.held))
	if writes >= maxWritesPerStep {
		c.poke() // more to do: go on at once
	}
}

// fence keeps held in line with the cluster Leases as the informer shows
// them: a Lease naming this replica that it does not know it holds (a
// write that succeeded on the server but failed here) is held, and a held
// cluster whose Lease names another replica (taken because this one looked
// gone) is stopped at once. While unhealthy, everything held is let go
// without writes.
func (c *coordinator) fence(healthy bool) {
	for _, obj := range c.informer.GetStore().List() {
		l := obj.(*coordinationv1.Lease)
		if l.Labels[shardRoleLabel] != shardRoleCluster {
			continue
		}
		name := l.Annotations[shardClusterAnno]
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		h, held := c.held[name]
		switch {
		case holder == c.o.Identity && !held && name != "":
			c.held[name] = &heldCluster{}
		case holder != c.o.Identity && held:
			if h.stopped == nil {
				c.log.Info("sharding: another replica holds a cluster this one ran; stopping it", "cluster", name, "holder", holder)
			}
			c.release(context.Background(), name, h, holder, false)
		}
	}
	if !healthy {
		for name, h := range c.held {
			c.release(context.Background(), name, h, "", false)
		}
	}
}

func (c *coordinator) renewIfDue(ctx context.Context) {
	if time.Since(time.Unix(0, c.lastRenew.Load())) >= c.o.RetryPeriod {
		c.renew(ctx)
	}
}

// renew heartbeats this replica's Lease (creating it the first time).
func (c *coordinator) renew(ctx context.Context) {
	now := time.Now()
	name := c.replicaLeaseName(c.o.Identity)
	rctx, cancel := context.WithTimeout(ctx, c.o.RetryPeriod)
	defer cancel()
	spec := coordinationv1.LeaseSpec{
		HolderIdentity:       ptr.To(c.o.Identity),
		LeaseDurationSeconds: ptr.To(int32(c.o.LeaseDuration / time.Second)), //nolint:gosec // validate keeps it under an hour
		RenewTime:            &metav1.MicroTime{Time: now},
	}
	var current *coordinationv1.Lease
	if obj, exists, err := c.informer.GetStore().GetByKey(c.o.Namespace + "/" + name); err == nil && exists {
		current = obj.(*coordinationv1.Lease).DeepCopy()
	} else if !c.created {
		// Not seen yet: a replica of this identity may have left it behind.
		if l, err := c.leases.Get(rctx, name, metav1.GetOptions{}); err == nil {
			current = l
		}
	} else {
		// Gone since (deleted by hand, or by a replica that found it
		// expired): others may be taking this replica's clusters, so they
		// stop here before it comes back.
		c.log.Info("sharding: this replica's Lease was removed; stopping its clusters and joining again", "lease", name)
		c.lastRenew.Store(0)
		for n, h := range c.held {
			c.release(ctx, n, h, "", false)
		}
		for _, cl := range c.clusters.all() {
			cl.disownIfLocal()
		}
	}
	var lerr error
	switch {
	case current != nil:
		l := current
		spec.AcquireTime = l.Spec.AcquireTime
		l.Spec = spec
		if c.leaving {
			if l.Annotations == nil {
				l.Annotations = map[string]string{}
			}
			l.Annotations[shardLeavingAnno] = "true"
		}
		_, lerr = c.leases.Update(rctx, l, metav1.UpdateOptions{})
	default:
		spec.AcquireTime = &metav1.MicroTime{Time: now}
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.o.Namespace, Labels: c.labels(shardRoleReplica)}, Spec: spec}
		_, lerr = c.leases.Create(rctx, l, metav1.CreateOptions{})
	}
	if lerr != nil {
		c.log.Error(lerr, "sharding: cannot renew this replica's Lease", "lease", name)
		return
	}
	c.created = true
	c.lastRenew.Store(now.UnixNano())
}

// observe returns the other live replicas that take clusters (not
// leaving), and the Leases of replicas no longer live.
func (c *coordinator) observe() (live []string, expired []*coordinationv1.Lease) {
	seen := map[string]bool{}
	for _, obj := range c.informer.GetStore().List() {
		l := obj.(*coordinationv1.Lease)
		if l.Labels[shardRoleLabel] != shardRoleReplica || l.Spec.HolderIdentity == nil {
			continue
		}
		id := *l.Spec.HolderIdentity
		if id == c.o.Identity {
			continue
		}
		seen[l.Name] = true
		switch {
		case !c.alive(l):
			expired = append(expired, l)
		case l.Annotations[shardLeavingAnno] != "true":
			live = append(live, id)
		}
	}
	// A Lease that vanished still counts for what was last seen of it: a
	// replica whose Lease was deleted under it stops its clusters at its
	// next renewal, well within a lease duration.
	for name, o := range c.seen {
		if !seen[name] && time.Since(o.at) >= c.o.LeaseDuration {
			delete(c.seen, name)
		}
	}
	return live, expired
}

// forget deletes the Lease of a replica that stopped renewing it a lease
// duration ago (as this replica saw it), unless it was renewed since. Left
// behind, it would count as live for a lease duration to every replica that
// starts later and first sees it then: such a replica would leave the
// clusters it assigns to the dead one unowned all that time, while the
// others, which know better, release them to it. Deleting it is as safe as
// taking the dead replica's clusters over, which this replica does by the
// same measure; the precondition spares a Lease renewed meanwhile.
func (c *coordinator) forget(ctx context.Context, l *coordinationv1.Lease) {
	o := c.seen[l.Name]
	if o.deleting == l.ResourceVersion {
		return // tried already; the informer has not caught up yet
	}
	rctx, cancel := context.WithTimeout(ctx, c.o.RetryPeriod)
	defer cancel()
	err := c.leases.Delete(rctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &l.ResourceVersion}})
	switch {
	case err == nil:
		c.log.Info("sharding: removed the Lease of a replica that went silent", "lease", l.Name, "holder", ptr.Deref(l.Spec.HolderIdentity, ""))
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
	default:
		c.log.Error(err, "sharding: cannot remove the Lease of a replica that went silent", "lease", l.Name)
		return // tried again next step
	}
	o.deleting = l.ResourceVersion
	c.seen[l.Name] = o
}

// alive reports whether a replica Lease was renewed, as this replica saw
// it, within the lease duration. Times are this replica's own: a Lease
// counts as renewed when its renewTime changed, whatever clock wrote it.
func (c *coordinator) alive(l *coordinationv1.Lease) bool {
	now := time.Now()
	var renew time.Time
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.Time
	}
	o, ok := c.seen[l.Name]
	if !ok || !o.renew.Equal(renew) {
		o = observedLease{renew: renew, at: now}
		c.seen[l.Name] = o
	}
	return now.Sub(o.at) < c.o.LeaseDuration
}

// holds reports whether replica id may still run clusters: its Lease
// exists and was renewed within the lease duration (a replica that leaves
// still runs what it has not released). Read afresh: a cluster's Lease
// taken by a replica is only ever seen after that replica's own Lease.
func (c *coordinator) holds(id string) bool {
	name := c.replicaLeaseName(id)
	obj, exists, err := c.informer.GetStore().GetByKey(c.o.Namespace + "/" + name)
	switch {
	case err == nil && exists:
		return c.alive(obj.(*coordinationv1.Lease))
	case c.seen[name].at != (time.Time{}):
		// Gone: it still holds until a lease duration after it was last
		// seen renewed.
		return time.Since(c.seen[name].at) < c.o.LeaseDuration
	}
	// Never seen: a replica that held it must have renewed within a lease
	// duration of this one joining.
	return time.Since(c.joined) < c.o.LeaseDuration
}

// desiredNames are the fleet's cluster names.
func (c *coordinator) desiredNames() []string {
	all := c.clusters.all()
	names := make([]string, 0, len(all))
	for _, cl := range all {
		if cl.known() {
			names = append(names, cl.name)
		}
	}
	return names
}

// acquire takes a cluster's Lease when nobody holds it (released, or its
// holder's replica Lease expired), then lets the cluster run here.
func (c *coordinator) acquire(ctx context.Context, name string) (wrote bool) {
	now := time.Now()
	leaseName := c.clusterLeaseName(name)
	obj, exists, err := c.informer.GetStore().GetByKey(c.o.Namespace + "/" + leaseName)
	if err != nil {
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, c.o.RetryPeriod)
	defer cancel()
	spec := coordinationv1.LeaseSpec{
		HolderIdentity: ptr.To(c.o.Identity),
		AcquireTime:    &metav1.MicroTime{Time: now},
		RenewTime:      &metav1.MicroTime{Time: now},
	}
	var unowned time.Time // since when nobody ran the cluster
	if !exists {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Name: leaseName, Namespace: c.o.Namespace, Labels: c.labels(shardRoleCluster),
			Annotations: map[string]string{shardClusterAnno: name},
		}, Spec: spec}
		if _, err := c.leases.Create(rctx, l, metav1.CreateOptions{}); err != nil {
			if !apierrors.IsAlreadyExists(err) {
				c.log.Error(err, "sharding: cannot create a cluster's Lease", "cluster", name)
			}
			return true
		}
	} else {
		l := obj.(*coordinationv1.Lease).DeepCopy()
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		switch {
		case holder == "":
		case holder == c.o.Identity:
			// Ours from before (a lost update): take it again.
		case c.holds(holder):
			return false // its holder runs it, or still stops it
		case c.heardFrom(rctx, holder):
			return true // this replica's view was stale
		}
		// Nobody has run it since its release, or since its holder was
		// last heard from.
		if l.Spec.RenewTime != nil {
			unowned = l.Spec.RenewTime.Time
		}
		if o, ok := c.seen[c.replicaLeaseName(holder)]; holder != "" && ok {
			unowned = o.renew
		}
		spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
		l.Spec = spec
		if _, err := c.leases.Update(rctx, l, metav1.UpdateOptions{}); err != nil {
			if !apierrors.IsConflict(err) {
				c.log.Error(err, "sharding: cannot take a cluster's Lease", "cluster", name, "from", holder)
			}
			return true
		}
		// The releaser's clock wrote the renewal, possibly after now was
		// read: never report less than nothing.
		unownedFor := max(time.Since(unowned), 0)
		c.metrics.handover(unownedFor)
		c.log.Info("sharding: took over cluster", "cluster", name, "from", holder, "unowned", unownedFor.Round(time.Millisecond))
	}
	c.held[name] = &heldCluster{}
	if cl := c.clusters.get(name); cl != nil && c.healthy() {
		cl.own()
	}
	return true
}

// heardFrom asks the API server (not the informer) whether holder's Lease
// was renewed since this replica last saw it: a cluster is taken from a
// replica that looks gone only once that is confirmed.
func (c *coordinator) heardFrom(ctx context.Context, holder string) bool {
	name := c.replicaLeaseName(holder)
	l, err := c.leases.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false
	case err != nil:
		return true // unknown: do not take
	}
	o, ok := c.seen[name]
	if l.Spec.RenewTime == nil || !ok {
		return false
	}
	return !l.Spec.RenewTime.Equal(&metav1.MicroTime{Time: o.renew})
}

// release stops a cluster here and, once its Manager has stopped, gives
// its Lease up (deletes it when the cluster left the fleet). An unhealthy
// replica only stops: it cannot write, and its Lease expiring frees its
// clusters.
func (c *coordinator) release(ctx context.Context, name string, h *heldCluster, owner string, healthy bool) (wrote bool) {
	if h.stopped == nil {
		h.stopped = closedChan
		if cl := c.clusters.get(name); cl != nil {
			h.stopped = cl.disown(owner)
		}
	}
	select {
	case <-h.stopped:
	default:
		if !h.watching {
			h.watching = true
			stopped := h.stopped
			go func() { <-stopped; c.poke() }()
		}
		return false
	}
	if !healthy {
		delete(c.held, name)
		return false
	}
	leaseName := c.clusterLeaseName(name)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.o.RetryPeriod)
	defer cancel()
	obj, exists, err := c.informer.GetStore().GetByKey(c.o.Namespace + "/" + leaseName)
	if err != nil || !exists {
		delete(c.held, name)
		return false
	}
	l := obj.(*coordinationv1.Lease).DeepCopy()
	if ptr.Deref(l.Spec.HolderIdentity, "") != c.o.Identity {
		delete(c.held, name)
		return false
	}
	if cl := c.clusters.get(name); cl == nil || !cl.known() {
		err = c.leases.Delete(rctx, leaseName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &l.ResourceVersion}})
	} else {
		l.Spec.HolderIdentity = ptr.To("")
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		_, err = c.leases.Update(rctx, l, metav1.UpdateOptions{})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		if !apierrors.IsConflict(err) {
			c.log.Error(err, "sharding: cannot release a cluster's Lease", "cluster", name)
		}
		return true
	}
	delete(c.held, name)
	c.log.V(1).Info("sharding: released cluster", "cluster", name, "to", owner)
	return true
}

// leave hands this replica's clusters over: it marks its Lease as leaving
// (the others reassign at once), stops and releases every cluster it
// holds, and deletes its Lease.
func (c *coordinator) leave() {
	c.leaving = true
	ctx := context.Background()
	// The Lease stays renewed for as long as this replica still runs
	// clusters, so nobody takes one before it has stopped here; a replica
	// that cannot renew any more stops them and leaves the rest to its
	// Lease's expiry.
	c.renew(ctx)
	t := time.NewTicker(coordinatorPeriod)
	defer t.Stop()
	for len(c.held) > 0 {
		c.renewIfDue(ctx)
		healthy := c.healthy()
		for n, h := range c.held {
			c.release(ctx, n, h, "", healthy)
		}
		if len(c.held) == 0 {
			break
		}
		select {
		case <-c.kick:
		case <-t.C:
		}
	}
	c.metrics.owned(0)
	name := c.replicaLeaseName(c.o.Identity)
	rctx, cancel := context.WithTimeout(ctx, c.o.RetryPeriod)
	defer cancel()
	if err := c.leases.Delete(rctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		c.log.Error(err, "sharding: cannot delete this replica's Lease; it expires by itself", "lease", name)
	}
	c.log.Info("sharding: left")
}

// collect deletes, at most max of them, the Leases of clusters that left
// the fleet and that nobody live holds (their holder died, or released
// them before the cluster was deleted).
func (c *coordinator) collect(ctx context.Context, names []string, limit int) {
	desired := make(map[string]bool, len(names))
	for _, n := range names {
		desired[n] = true
	}
	for _, obj := range c.informer.GetStore().List() {
		if limit == 0 || ctx.Err() != nil {
			return
		}
		l := obj.(*coordinationv1.Lease)
		name := l.Annotations[shardClusterAnno]
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		if l.Labels[shardRoleLabel] != shardRoleCluster || desired[name] || holder == c.o.Identity {
			continue
		}
		if _, held := c.held[name]; held || (holder != "" && c.holds(holder)) {
			continue
		}
		limit--
		err := c.leases.Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &l.ResourceVersion}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			c.log.Error(err, "sharding: cannot delete the Lease of a cluster that left", "cluster", name)
		}
	}
}
