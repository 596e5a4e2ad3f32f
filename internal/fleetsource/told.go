package fleetsource

import (
	"maps"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// told is what a FleetKind handler was told of a member's objects: the
// last object of each key an informer delivered and did not delete.
type told map[types.NamespacedName]client.Object

func keyOf(o client.Object) types.NamespacedName {
	return types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
}

// toldHandler is the informer handler of one attachment of a FleetKind
// source to a member's Manager. It passes the informer's notifications on
// to next (informerHandler's, which applies the predicates) and keeps what
// they told (the objects are the informer's own, which the member's cache
// holds anyway), so that the handler of the member's next Manager can tell
// what this one told and that one does not find.
//
// earlier is what the member's earlier Managers told and this informer has
// not delivered yet: each notification of a key settles it; settle tells
// the rest as deleted once the informer has delivered its initial list.
//
// Once closed (its attachment replaced or gone), it passes nothing more on.
// The informer calls it from one goroutine; settle and close run in others.
type toldHandler struct {
	next toolscache.ResourceEventHandler

	// deliver is held while next is called: a delete settle tells comes
	// before, or instead of, any later notification of the key.
	deliver sync.Mutex

	mu      sync.Mutex // under deliver, and never held while next runs
	closed  bool
	seen    told
	earlier told
}

func newToldHandler(next toolscache.ResourceEventHandler, earlier told) *toldHandler {
	if len(earlier) == 0 {
		earlier = nil
	}
	return &toldHandler{next: next, seen: told{}, earlier: earlier}
}

// note records a notification of obj (gone: a delete) and reports whether
// it is to be passed on.
func (t *toldHandler) note(obj any, gone bool) bool {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	o, ok := obj.(client.Object)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	if !ok {
		return true // informerHandler drops it
	}
	k := keyOf(o)
	delete(t.earlier, k)
	if gone {
		delete(t.seen, k)
	} else {
		t.seen[k] = o
	}
	return true
}

func (t *toldHandler) OnAdd(obj any, isInInitialList bool) {
	t.deliver.Lock()
	defer t.deliver.Unlock()
	if t.note(obj, false) {
		t.next.OnAdd(obj, isInInitialList)
	}
}

func (t *toldHandler) OnUpdate(oldObj, newObj any) {
	t.deliver.Lock()
	defer t.deliver.Unlock()
	if t.note(newObj, false) {
		t.next.OnUpdate(oldObj, newObj)
	}
}

func (t *toldHandler) OnDelete(obj any) {
	t.deliver.Lock()
	defer t.deliver.Unlock()
	if t.note(obj, true) {
		t.next.OnDelete(obj)
	}
}

// unsettled reports whether earlier Managers told of objects this
// informer has not delivered yet.
func (t *toldHandler) unsettled() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.closed && len(t.earlier) > 0
}

// settle is called once the informer has delivered its initial list to the
// handler: every object an earlier Manager told of that this one has not
// delivered is gone from the member, and is told deleted, with its last
// state known, as DeleteStateUnknown (as an informer tells an object that
// vanished across a relist). It stops where close stops it; what it has
// not told yet, close hands on.
func (t *toldHandler) settle() {
	t.mu.Lock()
	keys := make([]types.NamespacedName, 0, len(t.earlier))
	for k := range t.earlier {
		keys = append(keys, k)
	}
	t.mu.Unlock()
	for _, k := range keys {
		if !t.settleOne(k) {
			return
		}
	}
	t.mu.Lock()
	if len(t.earlier) == 0 {
		t.earlier = nil // settled: the map's memory goes too
	}
	t.mu.Unlock()
}

// settleOne tells k deleted unless this informer delivered it meanwhile;
// false once closed.
func (t *toldHandler) settleOne(k types.NamespacedName) bool {
	t.deliver.Lock()
	defer t.deliver.Unlock()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return false
	}
	o, ok := t.earlier[k]
	delete(t.earlier, k)
	t.mu.Unlock()
	if ok {
		t.next.OnDelete(toolscache.DeletedFinalStateUnknown{Key: tombKey(k), Obj: o})
	}
	return true
}

// close ends the handler: nothing more is passed on. It returns what the
// handler was told, by this informer or by earlier ones, and not told
// deleted, for the member's next Manager (nil if nothing).
func (t *toldHandler) close() told {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	// A key this informer delivered is no longer in earlier.
	all := t.seen
	maps.Copy(all, t.earlier)
	t.seen, t.earlier = nil, nil
	if len(all) == 0 {
		return nil
	}
	return all
}

// tombKey is the informer's key of k (MetaNamespaceKeyFunc's).
func tombKey(k types.NamespacedName) string {
	if k.Namespace == "" {
		return k.Name
	}
	return k.Namespace + "/" + k.Name
}
