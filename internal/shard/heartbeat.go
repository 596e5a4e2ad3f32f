package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"
)

// standbyDuplicate is the StandbyAnnotation of a replica that sees another
// process write its Lease.
const standbyDuplicate = "another process renews this Lease"

// heartbeat renews this replica's Lease, the way client-go's leader
// election renews its lock: an update of the version it last wrote or
// read, and on a conflict a read from the API server and one more update.
// A renewal whose answer was lost is resolved by that read, never by a
// cached copy. It also tells its own writes from those of another process
// that uses the same identity (WriterAnnotation): such a process may run
// the same clusters, so this replica runs none until it has been alone for
// the other's declared lease duration.
//
// Its methods are called from the loop's goroutine; renewed is read by the
// watchdog too.
type heartbeat struct {
	o      *Options
	leases coordclient.LeaseInterface
	cache  *cache
	log    logr.Logger
	name   string

	// renewed is the send time of the last renewal the API server
	// acknowledged (nil: none yet): the replica's claims stand until
	// RenewDeadline after it, as the others see them until LeaseDuration
	// after it. The time.Time itself is kept, monotonic reading and all,
	// and healthy measures on both clocks: a backward step of the wall
	// clock (an NTP step) must not stretch the deadline, nor a suspension
	// that stops the monotonic clock (a resumed VM), as the other replicas
	// go on counting theirs.
	renewed   atomic.Pointer[time.Time]
	last      *coordinationv1.Lease // the version last written or read; nil: read first
	wrote     bool                  // renewed at least once
	attempted time.Time
	fails     *failures
	leaving   bool

	// The renewTimes of this replica's last two renewals sent: a version
	// that carries one of them and another writer is a renewal of this
	// replica's that someone edited (an apply that dropped the writer
	// annotation), not another process's.
	sentRenews [2]time.Time

	// Another process's writes of this Lease.
	foreignAt  time.Time     // when one was last seen
	foreignRV  string        // the version seen then
	foreignFor time.Duration // its declared duration
	duplicate  bool          // one came after this replica's own: reported until alone
	dupFlag    atomic.Bool   // duplicate, for the readiness check
}

func newHeartbeat(o *Options, leases coordclient.LeaseInterface, c *cache, log logr.Logger) *heartbeat {
	return &heartbeat{
		o: o, leases: leases, cache: c, log: log, name: ReplicaLeaseName(o.Group, o.Identity),
		fails: newFailures(log, o.Clock, recoveredAfter, "sharding: cannot renew this replica's Lease", "sharding: renewing this replica's Lease again"),
	}
}

// due reports whether a renewal should be sent now: a retry period after
// the last attempt, or at once when what the Lease should say changed.
func (h *heartbeat) due(now time.Time) bool {
	if h.attempted.IsZero() || now.Sub(h.attempted) >= h.o.RetryPeriod {
		return true
	}
	// Only after a success: a failing replica retries at its pace.
	return h.last != nil && h.wrote && !h.fails.failing() && (h.last.Annotations[LeavingAnnotation] != h.leavingValue() || h.last.Annotations[StandbyAnnotation] != h.standbyValue(now))
}

// healthy reports whether this replica's last acknowledged renewal was
// sent within the renew deadline: only then may it run clusters.
func (h *heartbeat) healthy(now time.Time) bool {
	last := h.renewed.Load()
	return last != nil && within(*last, now, h.o.RenewDeadline)
}

// within reports whether now is less than d after since on both clocks:
// the monotonic one ignores steps of the wall clock, but may stand still
// while the machine is suspended, when the wall clock goes on (as the
// other replicas' clocks do). A time without a monotonic reading (a fake
// clock's, one read from a Lease) is measured on the wall clock alone.
func within(since, now time.Time, d time.Duration) bool {
	return now.Sub(since) < d && now.Round(0).Sub(since.Round(0)) < d
}

// alone reports whether no other process has written this replica's Lease
// within that process's declared duration.
func (h *heartbeat) alone(now time.Time) bool {
	return h.foreignAt.IsZero() || !now.Before(h.foreignAt.Add(h.foreignFor))
}

// check ends a duplicate episode once alone again, and reports alone.
func (h *heartbeat) check(now time.Time) bool {
	alone := h.alone(now)
	if alone && h.duplicate {
		h.duplicate = false
		h.dupFlag.Store(false)
		h.o.Metrics.DuplicateIdentity(false)
		h.log.Info("sharding: no other process has renewed this replica's Lease for its lease duration; running clusters again", "lease", h.name)
	}
	return alone
}

// observe looks at this replica's Lease as the cache holds it: a version
// another process wrote shows there first when that process renews in
// between this replica's renewals.
func (h *heartbeat) observe(e entry, ok bool, now time.Time) {
	if !ok || e.gone || e.lease.ResourceVersion == h.foreignRV ||
		(h.last != nil && h.last.ResourceVersion == e.lease.ResourceVersion) || !h.othersWrite(e.lease) {
		return
	}
	h.foreign(e.lease, now)
}

// othersWrite reports whether l is another process's write: another
// writer. A version without a writer that carries a renewTime this replica
// sent is not: that is its own renewal with the annotation edited away (an
// apply of a manifest without it); another process writes its own writer
// and renewTime.
func (h *heartbeat) othersWrite(l *coordinationv1.Lease) bool {
	writer, ok := l.Annotations[WriterAnnotation]
	if writer == h.o.Writer {
		return false
	}
	if ok && writer != "" || l.Spec.RenewTime == nil {
		return true
	}
	renew := l.Spec.RenewTime.Truncate(time.Microsecond)
	return !slices.ContainsFunc(h.sentRenews[:], func(t time.Time) bool { return !t.IsZero() && t.Equal(renew) })
}

// foreign records a version of this replica's Lease that another process
// wrote.
func (h *heartbeat) foreign(l *coordinationv1.Lease, now time.Time) {
	e := entry{rec: recordOf(l)}
	first := h.foreignAt.IsZero()
	if l.ResourceVersion == h.foreignRV {
		return // seen already: its time counts from then
	}
	h.foreignAt, h.foreignFor, h.foreignRV = now, e.declared(h.o.LeaseDuration), l.ResourceVersion
	switch {
	case h.wrote && !h.duplicate:
		h.duplicate = true
		h.dupFlag.Store(true)
		h.o.Metrics.DuplicateIdentity(true)
		msg := fmt.Sprintf("another process renews the Lease of replica %q: two replicas share one identity (a copied Deployment, or a host name shared on hostNetwork?); each runs no cluster until it has been alone for a lease duration", h.o.Identity)
		h.log.Error(errors.New("duplicate replica identity"), "sharding: "+msg, "lease", h.name, "otherWriter", e.rec.writer)
		if h.o.Events != nil {
			ref := &corev1.ObjectReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Namespace: l.Namespace, Name: l.Name, UID: l.UID}
			h.o.Events.Eventf(ref, nil, corev1.EventTypeWarning, "DuplicateIdentity", "Renew", "%s", msg)
		}
	case !h.wrote && first:
		h.log.Info("sharding: this replica's Lease was last renewed by another process with the same identity (an earlier run?); running no cluster until that process has been silent for its lease duration",
			"lease", h.name, "wait", h.foreignFor.String())
	}
}

func (h *heartbeat) leavingValue() string {
	if h.leaving {
		return "true"
	}
	return ""
}

func (h *heartbeat) standbyValue(now time.Time) string {
	if h.alone(now) {
		return ""
	}
	return standbyDuplicate
}

// renew sends one renewal (creating the Lease when there is none), reading
// the Lease afresh on a conflict; it reports whether the API server
// acknowledged it.
func (h *heartbeat) renew(ctx context.Context) bool {
	now := h.o.Clock.Now()
	h.attempted = now
	for range 3 {
		if h.last == nil {
			cur, err := h.read(ctx, now)
			switch {
			case apierrors.IsNotFound(err):
				created, err := h.create(ctx, now)
				switch {
				case err == nil:
					h.acked(now, created)
					return true
				case apierrors.IsAlreadyExists(err):
					continue // another process of this identity: read it
				}
				h.fails.failed(err, "lease", h.name)
				return false
			case err != nil:
				h.fails.failed(err, "lease", h.name)
				return false
			}
			h.last = cur
		}
		rctx, cancel := context.WithTimeout(ctx, h.o.requestTimeout())
		updated, err := h.leases.Update(rctx, h.desired(h.last, now), metav1.UpdateOptions{})
		cancel()
		switch {
		case err == nil:
			h.acked(now, updated)
			return true
		case apierrors.IsConflict(err):
			// Written since this replica's last version: by a renewal of
			// its own whose answer was lost, or by another process. Only a
			// read tells which.
			h.last = nil
		case apierrors.IsNotFound(err):
			// Deleted by hand, or by a replica that found it expired: the
			// others see this replica as gone only once its declared
			// duration has passed since its last renewal; it is back well
			// before that.
			h.log.Info("sharding: this replica's Lease was deleted; creating it again", "lease", h.name)
			h.last = nil
			h.cache.missing(h.name)
		default:
			// Outcome unknown: if it was applied, the next update
			// conflicts and reads.
			h.fails.failed(err, "lease", h.name)
			return false
		}
	}
	h.fails.failed(errors.New("the Lease changed under every attempt"), "lease", h.name)
	return false
}

// read gets this replica's Lease from the API server (never a cache), and
// notes a version another process wrote.
func (h *heartbeat) read(ctx context.Context, now time.Time) (*coordinationv1.Lease, error) {
	rctx, cancel := context.WithTimeout(ctx, h.o.requestTimeout())
	defer cancel()
	sent := h.o.Clock.Now()
	cur, err := h.leases.Get(rctx, h.name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			h.cache.missing(h.name)
		}
		return nil, err
	}
	h.cache.fresh(cur, sent)
	if h.othersWrite(cur) {
		h.foreign(cur, now)
	}
	return cur, nil
}

func (h *heartbeat) create(ctx context.Context, now time.Time) (*coordinationv1.Lease, error) {
	rctx, cancel := context.WithTimeout(ctx, h.o.requestTimeout())
	defer cancel()
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: h.name, Namespace: h.o.Namespace}}
	return h.leases.Create(rctx, h.desired(l, now), metav1.CreateOptions{})
}

// desired is base renewed by this replica at now.
func (h *heartbeat) desired(base *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
	l := base.DeepCopy()
	setMeta(l, h.o.Group, RoleReplica, h.o.Writer)
	setAnnotation(l, LeavingAnnotation, h.leavingValue())
	setAnnotation(l, StandbyAnnotation, h.standbyValue(now))
	setAnnotation(l, PinsAnnotation, h.o.pins)
	setAnnotation(l, LoadFactorAnnotation, h.o.loadFactor)
	if ptr.Deref(l.Spec.HolderIdentity, "") != h.o.Identity || l.Spec.AcquireTime == nil {
		if l.Spec.HolderIdentity != nil {
			l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
		}
		l.Spec.AcquireTime = &metav1.MicroTime{Time: now}
	}
	l.Spec.HolderIdentity = ptr.To(h.o.Identity)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(h.o.LeaseDuration / time.Second)) //nolint:gosec // at most MaxLeaseDuration
	// As a Lease keeps it (MicroTime): a read compares it exactly.
	renew := now.Truncate(time.Microsecond)
	l.Spec.RenewTime = &metav1.MicroTime{Time: renew}
	if !h.sentRenews[0].Equal(renew) {
		h.sentRenews[1], h.sentRenews[0] = h.sentRenews[0], renew
	}
	return l
}

func (h *heartbeat) acked(sent time.Time, l *coordinationv1.Lease) {
	h.last, h.wrote = l, true
	h.renewed.Store(&sent)
	h.cache.written(l)
	h.fails.ok("lease", h.name)
}

// remove deletes this replica's Lease as it leaves, unless another process
// wrote it since.
func (h *heartbeat) remove(ctx context.Context) {
	if h.last == nil || !h.wrote {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, h.o.requestTimeout())
	defer cancel()
	rv := h.last.ResourceVersion
	err := h.leases.Delete(rctx, h.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		h.log.Error(err, "sharding: cannot delete this replica's Lease; it expires by itself", "lease", h.name)
	}
}

// setMeta marks l as one of group's Leases, with role, written by writer.
func setMeta(l *coordinationv1.Lease, group, role, writer string) {
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[GroupLabel] = GroupKey(group)
	l.Labels[RoleLabel] = role
	setAnnotation(l, GroupAnnotation, group)
	setAnnotation(l, WriterAnnotation, writer)
}

// setAnnotation sets an annotation, or removes it for "".
func setAnnotation(l *coordinationv1.Lease, key, value string) {
	if value == "" {
		delete(l.Annotations, key)
		return
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[key] = value
}
