package leaninformer

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/sets"
	toolscache "k8s.io/client-go/tools/cache"
)

// The informer's store: each change goes to the indexer, then to the
// handlers' queues, in the pump's goroutine (a list's in the goroutine
// that lists). It delivers what client-go's informer does for the same
// change (see processDeltas in client-go's controller.go).

func (i *Informer) transformed(obj any) (any, error) {
	if i.transform == nil {
		return obj, nil
	}
	if _, tombstone := obj.(toolscache.DeletedFinalStateUnknown); tombstone {
		return obj, nil
	}
	return i.transform(obj)
}

// upsert stores obj and delivers an add (an object the store did not hold)
// or an update.
func (i *Informer) upsert(obj any) error { return i.change(obj, false) }

// remove drops obj from the store and delivers its delete, held or not (as
// client-go does).
func (i *Informer) remove(obj any) error { return i.change(obj, true) }

// change stores obj, or drops it (del), and delivers the event it makes.
func (i *Informer) change(obj any, del bool) error {
	obj, err := i.transformed(obj)
	if err != nil {
		return err
	}
	i.deliver.Lock()
	defer i.deliver.Unlock()
	i.mu.Lock()
	var e event
	if del {
		e, err = event{typ: deleted, obj: obj}, i.indexer.Delete(obj)
	} else if old, exists, gerr := i.indexer.Get(obj); gerr == nil && exists {
		e, err = event{typ: updated, old: old, obj: obj}, i.indexer.Update(obj)
	} else {
		e, err = event{typ: added, obj: obj, initial: !i.hasSynced}, i.indexer.Add(obj)
	}
	handlers := i.handlers
	i.mu.Unlock()
	if err != nil {
		return err
	}
	deliverEvent(handlers, e)
	return nil
}

// replace sets the store to objs, then delivers a DeletedFinalStateUnknown
// for each object that is gone, and an add or an update for each in objs,
// in their order. The first replace is the initial list: the informer has
// synced once the store holds it, its adds are marked so, and a handler's
// registration has synced once they are delivered to it.
func (i *Informer) replace(objs []any, resourceVersion string) error {
	list := make([]any, len(objs))
	keys := sets.New[string]()
	for n, obj := range objs {
		obj, err := i.transformed(obj)
		if err != nil {
			return err
		}
		key, err := toolscache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			return toolscache.KeyError{Obj: obj, Err: err}
		}
		list[n] = obj
		keys.Insert(key)
	}
	i.deliver.Lock()
	defer i.deliver.Unlock()
	i.mu.Lock()
	var gone []event
	for _, key := range i.indexer.ListKeys() {
		if keys.Has(key) {
			continue
		}
		obj, _, _ := i.indexer.GetByKey(key)
		gone = append(gone, event{typ: deleted, obj: toolscache.DeletedFinalStateUnknown{Key: key, Obj: obj}})
	}
	olds := make([]any, len(list))
	for n, obj := range list {
		if old, exists, err := i.indexer.Get(obj); err == nil && exists {
			olds[n] = old
		}
	}
	err := i.indexer.Replace(list, resourceVersion)
	handlers, initial := i.handlers, !i.hasSynced
	if err == nil && initial {
		// The store holds the initial list: the informer has synced, as
		// client-go's has once its queue has handed the list on. A handler
		// may read the store, through a cache that waits for the sync, while
		// it is handed the list below.
		i.hasSynced = true
		close(i.synced)
	}
	i.mu.Unlock()
	if err != nil {
		return err
	}
	for _, e := range gone {
		deliverEvent(handlers, e)
	}
	for n, obj := range list {
		if olds[n] != nil {
			deliverEvent(handlers, event{typ: updated, old: olds[n], obj: obj})
		} else {
			deliverEvent(handlers, event{typ: added, obj: obj, initial: initial})
		}
	}
	if initial {
		// Handlers added since are synced once they have replayed the store.
		for _, r := range handlers {
			r.upstreamSynced()
		}
	}
	return nil
}

// resync delivers every stored object, unchanged, to the handlers whose
// resync is due.
func (i *Informer) resync() {
	i.deliver.Lock()
	defer i.deliver.Unlock()
	i.mu.Lock()
	objs := i.indexer.List()
	handlers := i.handlers
	i.mu.Unlock()
	for _, obj := range objs {
		deliverEvent(handlers, event{typ: updated, old: obj, obj: obj})
	}
}

// deliverEvent hands e to every handler, but an update that does not
// change the resourceVersion (a resync, or a relist of an object that did
// not change) only to the handlers whose resync is due, as client-go does.
func deliverEvent(handlers []*registration, e event) {
	unchanged := e.typ == updated && sameVersion(e.old, e.obj)
	for _, r := range handlers {
		if !unchanged || r.syncing.Load() {
			r.deliver(e)
		}
	}
}

func sameVersion(old, obj any) bool {
	o, err := meta.Accessor(old)
	if err != nil {
		return false
	}
	n, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	return o.GetResourceVersion() == n.GetResourceVersion()
}
