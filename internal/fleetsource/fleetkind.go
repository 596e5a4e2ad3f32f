package fleetsource

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	membermgr "github.com/mccr-dev/mccr/internal/member"
	"github.com/mccr-dev/mccr/known"
)

// FleetKind returns a source for a host controller that delivers the
// events of obj's kind from every running member the feed tells of to h,
// after the predicates (see server.FleetKind). log gets a line per member
// whose informer cannot be had, with the member's name.
//
// When a member's Manager is replaced, what the handler was told of its
// objects is carried over to the next Manager's attachment, which tells
// as deleted (DeleteStateUnknown) those its informer no longer has once
// it has synced (see toldHandler). A member that leaves the fleet or this
// replica (Member.Left, Member.Away) is forgotten: nothing is told.
func FleetKind(feed *Feed, log logr.Logger, obj client.Object, h handler.EventHandler, preds ...predicate.Predicate) source.Source {
	return &fleetKind{feed: feed, log: log, obj: obj, h: h, preds: preds}
}

type fleetKind struct {
	feed  *Feed
	log   logr.Logger
	obj   client.Object
	h     handler.EventHandler
	preds []predicate.Predicate
	once  startOnce
}

func (k *fleetKind) String() string { return fmt.Sprintf("fleet kind source: %T", k.obj) }

// Start follows the fleet until ctx ends.
func (k *fleetKind) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	if k.feed == nil || k.obj == nil || k.h == nil {
		return errors.New("server.FleetKind: the Server, object and handler must not be nil")
	}
	if err := k.once.first(); err != nil {
		return err
	}
	// members is only touched by the subscription's goroutine.
	members := map[string]*memberWatch{}
	k.feed.Subscribe(ctx, func(m Member) {
		w := members[m.Name]
		if w == nil {
			w = &memberWatch{}
			members[m.Name] = w
		}
		if w.a != nil && w.a.mgr == m.Mgr {
			return // the same Manager, Ready again or Unreachable
		}
		if w.a != nil {
			w.told = w.a.detach()
			w.a = nil
		}
		if m.Left || m.Away {
			// Gone from this replica's fleet: nothing is told of its
			// objects (see server.FleetKind), and nothing is kept.
			delete(members, m.Name)
			return
		}
		if m.Mgr != nil {
			w.a = k.attach(ctx, q, m.Name, m.Mgr, w.told)
			w.told = nil
		}
		if w.a == nil && w.told == nil {
			delete(members, m.Name)
		}
	}, func() {
		for _, w := range members {
			if w.a != nil {
				w.a.detach()
			}
		}
	})
	return nil
}

// memberWatch is the source's state of one member: its attachment to the
// member's running Manager, or, between Managers (the member restarting,
// Failed, Syncing), what the handler was told of the member's objects by
// the earlier ones, for the next attachment to settle.
type memberWatch struct {
	a    *attachment
	told told
}

// attachment is the source's handler on one member's informer.
type attachment struct {
	mgr    manager.Manager
	cancel context.CancelFunc
	h      *toldHandler
}

// detach ends the attachment: its handler passes nothing more on and is
// removed from the informer. It returns what the handler was told of the
// member's objects and not told deleted, by this Manager's informer or
// earlier ones.
func (a *attachment) detach() told {
	t := a.h.close()
	a.cancel()
	return t
}

// attach adds the source's handler to the informer of the member's
// Manager, in a goroutine of its own (so a member slow to answer discovery
// delays no other). A kind the member does not serve yet is waited for;
// other failures are retried with a backoff. The handler is removed when
// the attachment is detached.
//
// earlier is what the handler was told of the member's objects by its
// earlier Managers: once this informer has delivered its initial list to
// the handler, those it did not deliver are told deleted (see
// toldHandler.settle).
func (k *fleetKind) attach(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], name string, mgr manager.Manager, earlier told) *attachment {
	actx, cancel := context.WithCancel(ctx)
	// The handler's ctx ends with the attachment: a member that leaves
	// waits for handler calls under way as it stops.
	hctx := known.WithCluster(actx, name)
	log := k.log.WithValues("cluster", name, "source", k.String())
	// A kind the member does not serve yet (its CRD not installed there) is
	// waited for as the member's own controllers wait for theirs.
	wctx := membermgr.WaitForKind(actx)
	th := newToldHandler(informerHandler(hctx, q, k.h, k.preds), earlier)
	go func() {
		backoff := wait.Backoff{Duration: time.Second, Factor: 2, Steps: 6, Cap: 30 * time.Second}
		for {
			inf, err := mgr.GetCache().GetInformer(wctx, k.obj, cache.BlockUntilSynced(false))
			var reg toolscache.ResourceEventHandlerRegistration
			if err == nil {
				reg, err = inf.AddEventHandler(th)
			}
			if err == nil {
				context.AfterFunc(actx, func() { _ = inf.RemoveEventHandler(reg) })
				if th.unsettled() {
					select {
					case <-reg.HasSyncedChecker().Done():
						th.settle()
					case <-actx.Done():
						// Detached first: what is unsettled goes on to
						// the member's next Manager.
					}
				}
				return
			}
			if actx.Err() != nil {
				return
			}
			d := backoff.Step()
			log.Error(err, "cannot watch the kind in this member; trying again", "retryIn", d)
			t := time.NewTimer(d)
			select {
			case <-actx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
	return &attachment{mgr: mgr, cancel: cancel, h: th}
}
