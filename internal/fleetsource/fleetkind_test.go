package fleetsource

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/known"
)

// fakeInformer is one Manager's informer of the kind: the test delivers
// its notifications and says when its initial list is delivered.
type fakeInformer struct {
	cache.Informer
	added   chan struct{} // closed once the source's handler is on it
	synced  chan struct{} // closed by sync
	mu      sync.Mutex
	h       toolscache.ResourceEventHandler
	removed bool
}

func (i *fakeInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.h = h
	close(i.added)
	return fakeRegistration{i.synced}, nil
}

func (i *fakeInformer) RemoveEventHandler(toolscache.ResourceEventHandlerRegistration) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.removed = true
	return nil
}

func (i *fakeInformer) handler(t *testing.T) toolscache.ResourceEventHandler {
	t.Helper()
	select {
	case <-i.added:
	case <-time.After(10 * time.Second):
		t.Fatal("the source's handler was not added to the informer")
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.h
}

func (i *fakeInformer) add(t *testing.T, objs ...client.Object) {
	t.Helper()
	h := i.handler(t)
	for _, o := range objs {
		h.OnAdd(o, false)
	}
}

func (i *fakeInformer) sync() { close(i.synced) }

func (i *fakeInformer) waitRemoved(t *testing.T) {
	t.Helper()
	eventually(t, "handler removed from the informer", func() bool {
		i.mu.Lock()
		defer i.mu.Unlock()
		return i.removed
	})
}

type fakeRegistration struct{ synced chan struct{} }

func (r fakeRegistration) HasSynced() bool {
	select {
	case <-r.synced:
		return true
	default:
		return false
	}
}
func (r fakeRegistration) HasSyncedChecker() toolscache.DoneChecker { return r }
func (r fakeRegistration) Name() string                             { return "fake" }
func (r fakeRegistration) Done() <-chan struct{}                    { return r.synced }

type fakeCache struct {
	cache.Cache
	inf *fakeInformer
}

func (c fakeCache) GetInformer(context.Context, client.Object, ...cache.InformerGetOption) (cache.Informer, error) {
	return c.inf, nil
}

type fakeManager struct {
	manager.Manager
	inf *fakeInformer
}

func (m *fakeManager) GetCache() cache.Cache { return fakeCache{inf: m.inf} }

func newFakeManager() *fakeManager {
	return &fakeManager{inf: &fakeInformer{added: make(chan struct{}), synced: make(chan struct{})}}
}

func cm(name, version string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{"v": version}}}
}

// deletes records the creates and deletes a handler got, in order, as
// "create cluster/name/v=<label>" and
// "delete cluster/name/v=<label>/unknown=<DeleteStateUnknown>".
type deletes struct {
	mu  sync.Mutex
	got []string
}

func (d *deletes) funcs() handler.Funcs {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			cluster, _ := known.ClusterFrom(ctx)
			d.mu.Lock()
			defer d.mu.Unlock()
			d.got = append(d.got, fmt.Sprintf("create %s/%s/v=%s", cluster, e.Object.GetName(), e.Object.GetLabels()["v"]))
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			cluster, _ := known.ClusterFrom(ctx)
			d.mu.Lock()
			defer d.mu.Unlock()
			d.got = append(d.got, fmt.Sprintf("delete %s/%s/v=%s/unknown=%v", cluster, e.Object.GetName(), e.Object.GetLabels()["v"], e.DeleteStateUnknown))
		},
	}
}

// list is the deletes, sorted, without their prefix.
func (d *deletes) list() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var got []string
	for _, s := range d.got {
		if del, ok := strings.CutPrefix(s, "delete "); ok {
			got = append(got, del)
		}
	}
	slices.Sort(got)
	return got
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// attachWorkDone waits until no goroutine of the source attaches or
// settles: what a new Manager had to settle has been told.
func attachWorkDone(t *testing.T) {
	t.Helper()
	eventually(t, "attach work done", func() bool {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		return !strings.Contains(string(buf), "fleetsource.(*fleetKind).attach.func")
	})
}

// TestFleetKindSettlesWhatEarlierManagersTold: the objects the handler was
// told of by a member's earlier Managers and that its new Manager's
// informer does not deliver by the time it has synced are told deleted,
// once, with DeleteStateUnknown, their last state, the member in ctx and
// after the predicates; a Manager replaced before its informer synced
// tells nothing and hands them on, with what it told itself; a member
// that leaves the fleet, or this replica, is told nothing of.
func TestFleetKindSettlesWhatEarlierManagersTold(t *testing.T) {
	var f Feed
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	d := &deletes{}
	noIgnored := predicate.Funcs{DeleteFunc: func(e event.DeleteEvent) bool { return e.Object.GetName() != "ignored" }}
	src := FleetKind(&f, logr.Discard(), &corev1.ConfigMap{}, d.funcs(), noIgnored)
	if err := src.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}

	m1 := newFakeManager()
	f.Publish(Member{Name: "m", Phase: "Ready", Mgr: m1})
	m1.inf.add(t, cm("a", "1"), cm("b", "1"), cm("ignored", "1"), cm("deleted", "1"))
	h1 := m1.inf.handler(t)
	h1.OnUpdate(cm("b", "1"), cm("b", "2"))
	h1.OnDelete(cm("deleted", "1"))
	m1.inf.sync()
	f.Publish(Member{Name: "m", Phase: "Stopping"})
	m1.inf.waitRemoved(t)

	// A Manager stopped before its informer synced: it settles nothing.
	m2 := newFakeManager()
	f.Publish(Member{Name: "m", Phase: "Ready", Mgr: m2})
	m2.inf.add(t, cm("a", "2"), cm("new", "1"))
	f.Publish(Member{Name: "m", Phase: "Failed"})
	m2.inf.waitRemoved(t)
	m2.inf.sync()
	m2.inf.add(t, cm("late", "1")) // after its removal: not passed on
	attachWorkDone(t)
	informers := []string{"m/deleted/v=1/unknown=false"}
	if got := d.list(); !slices.Equal(got, informers) {
		t.Fatalf("deletes told by a Manager stopped before it synced: %v, want only the informer's %v", got, informers)
	}

	m3 := newFakeManager()
	f.Publish(Member{Name: "m", Phase: "Ready", Mgr: m3})
	m3.inf.add(t, cm("a", "3"))
	m3.inf.sync()
	attachWorkDone(t)
	want := []string{"m/b/v=2/unknown=true", "m/deleted/v=1/unknown=false", "m/new/v=1/unknown=true"}
	if got := d.list(); !slices.Equal(got, want) {
		t.Fatalf("deletes after the new Manager synced: %v, want %v", got, want)
	}

	// Gone from the fleet (or away to another replica) and back: the
	// objects told before are not told deleted.
	for _, gone := range []Member{{Name: "m", Left: true}, {Name: "m", Phase: "Elsewhere", Away: true}} {
		a := newFakeManager()
		f.Publish(Member{Name: "m", Phase: "Ready", Mgr: a})
		a.inf.add(t, cm("a", "3"), cm("x", "1"))
		a.inf.sync()
		f.Publish(gone)
		a.inf.waitRemoved(t)
		b := newFakeManager()
		f.Publish(Member{Name: "m", Phase: "Ready", Mgr: b})
		b.inf.handler(t)
		b.inf.sync()
		attachWorkDone(t)
		if got := d.list(); !slices.Equal(got, want) {
			t.Fatalf("after %+v and back: deletes %v, want %v", gone, got, want)
		}
		f.Publish(Member{Name: "m", Left: true})
		b.inf.waitRemoved(t)
	}
}

// TestToldHandlerSettlesBeforeLaterNotifications: a key the informer
// delivers while the earlier objects are being settled is not told
// deleted after it, whichever comes first; a closed handler hands on what
// it did not settle.
func TestToldHandlerSettlesBeforeLaterNotifications(t *testing.T) {
	d := &deletes{}
	next := informerHandler(known.WithCluster(context.Background(), "m"), nil, d.funcs(), nil)
	earlier := told{}
	for i := range 200 {
		o := cm(fmt.Sprintf("o%d", i), "1")
		earlier[keyOf(o)] = o
	}
	th := newToldHandler(next, earlier)
	var wg sync.WaitGroup
	wg.Go(th.settle)
	for i := range 200 {
		th.OnAdd(cm(fmt.Sprintf("o%d", i), "2"), false)
		th.OnDelete(cm(fmt.Sprintf("o%d", i), "2"))
	}
	wg.Wait()
	// Each key was told deleted by settle at most once, and then before
	// the informer's notifications of it.
	d.mu.Lock()
	order := slices.Clone(d.got)
	d.mu.Unlock()
	for i := range 200 {
		name := fmt.Sprintf("o%d", i)
		var told []string
		for _, s := range order {
			if strings.Contains(s, " m/"+name+"/") {
				told = append(told, strings.SplitN(s, "/", 2)[0]+"/"+strings.SplitN(s, "/", 3)[2])
			}
		}
		got := strings.Join(told, ", ")
		if got != "create m/v=2, delete m/v=2/unknown=false" && got != "delete m/v=1/unknown=true, create m/v=2, delete m/v=2/unknown=false" {
			t.Fatalf("%s: told %s", name, got)
		}
	}
	if th.close() != nil {
		t.Error("a handler whose informer deleted everything handed objects on")
	}

	th = newToldHandler(next, told{keyOf(cm("a", "1")): cm("a", "1"), keyOf(cm("b", "1")): cm("b", "1")})
	th.OnAdd(cm("c", "1"), false)
	th.OnUpdate(cm("a", "1"), cm("a", "2"))
	rest := th.close()
	th.settle()
	th.OnAdd(cm("d", "1"), false)
	got := make([]string, 0, len(rest))
	for k, o := range rest {
		got = append(got, k.Name+"/"+o.GetLabels()["v"])
	}
	slices.Sort(got)
	if want := []string{"a/2", "b/1", "c/1"}; !slices.Equal(got, want) {
		t.Errorf("closed handler handed on %v, want %v", got, want)
	}
}
