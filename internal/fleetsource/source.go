package fleetsource

import (
	"context"
	"errors"
	"sync"

	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// ErrStarted is returned by a second Start of one source: like
// controller-runtime's sources, each serves one controller.
var ErrStarted = errors.New("source already started; make one per controller")

// startOnce lets a source start once.
type startOnce struct{ once sync.Once }

// first is nil for the first call and ErrStarted after.
func (s *startOnce) first() error {
	first := false
	s.once.Do(func() { first = true })
	if !first {
		return ErrStarted
	}
	return nil
}

// informerHandler turns an informer's notifications into calls of a
// controller-runtime event handler, after the predicates, as
// controller-runtime's Kind source does. ctx is what the handler gets: it
// names the cluster the event is about.
func informerHandler(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], h handler.EventHandler, preds []predicate.Predicate) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			o, ok := obj.(client.Object)
			if !ok {
				return
			}
			e := event.CreateEvent{Object: o}
			for _, p := range preds {
				if !p.Create(e) {
					return
				}
			}
			h.Create(ctx, e, q)
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(client.Object)
			n, ok2 := newObj.(client.Object)
			if !ok1 || !ok2 {
				return
			}
			e := event.UpdateEvent{ObjectOld: o, ObjectNew: n}
			for _, p := range preds {
				if !p.Update(e) {
					return
				}
			}
			h.Update(ctx, e, q)
		},
		DeleteFunc: func(obj any) {
			e := event.DeleteEvent{}
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				e.DeleteStateUnknown = true
				obj = tomb.Obj
			}
			o, ok := obj.(client.Object)
			if !ok {
				return
			}
			e.Object = o
			for _, p := range preds {
				if !p.Delete(e) {
					return
				}
			}
			h.Delete(ctx, e, q)
		},
	}
}
