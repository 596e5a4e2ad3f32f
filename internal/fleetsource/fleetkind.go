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
	// attached is only touched by the subscription's goroutine.
	attached := map[string]*attachment{}
	k.feed.Subscribe(ctx, func(m Member) {
		a := attached[m.Name]
		if a != nil && a.mgr == m.Mgr {
			return // the same Manager, Ready again or Unreachable
		}
		if a != nil {
			a.cancel()
			delete(attached, m.Name)
		}
		if m.Mgr != nil {
			attached[m.Name] = k.attach(ctx, q, m.Name, m.Mgr)
		}
	}, func() {
		for _, a := range attached {
			a.cancel()
		}
	})
	return nil
}

// attachment is the source's handler on one member's informer.
type attachment struct {
	mgr    manager.Manager
	cancel context.CancelFunc
}

// attach adds the source's handler to the informer of the member's
// Manager, in a goroutine of its own (so a member slow to answer discovery
// delays no other). A kind the member does not serve yet is waited for;
// other failures are retried with a backoff. The handler is removed when
// the attachment is cancelled.
func (k *fleetKind) attach(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], name string, mgr manager.Manager) *attachment {
	actx, cancel := context.WithCancel(ctx)
	// The handler's ctx ends with the attachment: a member that leaves
	// waits for handler calls under way as it stops.
	hctx := known.WithCluster(actx, name)
	log := k.log.WithValues("cluster", name, "source", k.String())
	// A kind the member does not serve yet (its CRD not installed there) is
	// waited for as the member's own controllers wait for theirs.
	wctx := membermgr.WaitForKind(actx)
	go func() {
		backoff := wait.Backoff{Duration: time.Second, Factor: 2, Steps: 6, Cap: 30 * time.Second}
		for {
			inf, err := mgr.GetCache().GetInformer(wctx, k.obj, cache.BlockUntilSynced(false))
			var reg toolscache.ResourceEventHandlerRegistration
			if err == nil {
				reg, err = inf.AddEventHandler(informerHandler(hctx, q, k.h, k.preds))
			}
			if err == nil {
				context.AfterFunc(actx, func() { _ = inf.RemoveEventHandler(reg) })
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
	return &attachment{mgr: mgr, cancel: cancel}
}
