package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

var leasesResource = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

// store is a fake API server's Leases: every write moves one counter, an
// update or a delete at another version conflicts, as etcd's do (client-go's
// fake clientset does not check versions).
type store struct {
	mu       sync.Mutex
	ns       string
	rv       int64
	items    map[string]*coordinationv1.Lease
	log      []watch.Event // every change, for watches that start behind
	watchers map[*fakeWatch]bool
}

func newStore(ns string) *store {
	return &store{ns: ns, items: map[string]*coordinationv1.Lease{}, watchers: map[*fakeWatch]bool{}}
}

func (s *store) nextLocked() string {
	s.rv++
	return strconv.FormatInt(s.rv, 10)
}

func (s *store) emitLocked(t watch.EventType, l *coordinationv1.Lease) {
	ev := watch.Event{Type: t, Object: l.DeepCopy()}
	s.log = append(s.log, ev)
	for w := range s.watchers {
		w.send(ev)
	}
}

// put writes l as is (a restore, a GitOps apply, a hand edit): it takes
// the store's next version, whatever version it says.
func (s *store) put(l *coordinationv1.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l = l.DeepCopy()
	l.Namespace = s.ns
	t := watch.Modified
	if old, ok := s.items[l.Name]; ok {
		l.UID = old.UID
	} else {
		t = watch.Added
		l.UID = types.UID("uid-" + l.Name + "-" + strconv.FormatInt(s.rv, 10))
	}
	l.ResourceVersion = s.nextLocked()
	s.items[l.Name] = l
	s.emitLocked(t, l)
}

func (s *store) get(name string) *coordinationv1.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.items[name]; ok {
		return l.DeepCopy()
	}
	return nil
}

func (s *store) list() []coordinationv1.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]coordinationv1.Lease, 0, len(s.items))
	for _, l := range s.items {
		out = append(out, *l.DeepCopy())
	}
	return out
}

// fault is what goes wrong with one call of one client.
type fault int

const (
	pass    fault = iota
	refuse        // fails at once, nothing applied (connection refused)
	hang          // takes the whole request timeout, nothing applied
	loseAns       // applied, but the answer is lost
)

// fakeLeases is one replica's client of a store, with its faults.
type fakeLeases struct {
	coordclient.LeaseInterface // the methods not faked here panic
	s                          *store
	clock                      *clocktesting.FakeClock
	// onHang, if set, is told of a call that hangs; else the call takes
	// the request timeout of fake time.
	onHang  func()
	timeout time.Duration

	mu    sync.Mutex
	fault func(verb, name string) fault
	calls map[string]int
}

func (f *fakeLeases) setFault(fn func(verb, name string) fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fault = fn
}

func (f *fakeLeases) count(verb string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[verb]
}

// call applies the fault for a call; apply runs the call on the store.
func (f *fakeLeases) call(verb, name string, apply func() error) error {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[verb]++
	fn := f.fault
	f.mu.Unlock()
	mode := pass
	if fn != nil {
		mode = fn(verb, name)
	}
	switch mode {
	case refuse:
		return fmt.Errorf("%s %s: dial tcp 127.0.0.1:6443: connect: connection refused", verb, name)
	case hang:
		if f.onHang != nil {
			f.onHang()
		} else {
			f.clock.Step(f.timeout)
		}
		return fmt.Errorf("%s %s: %w", verb, name, context.DeadlineExceeded)
	case loseAns:
		if err := apply(); err != nil {
			return err
		}
		return fmt.Errorf("%s %s: http2: client connection lost", verb, name)
	case pass:
	}
	return apply()
}

func (f *fakeLeases) Get(_ context.Context, name string, _ metav1.GetOptions) (*coordinationv1.Lease, error) {
	var out *coordinationv1.Lease
	err := f.call("get", name, func() error {
		if out = f.s.get(name); out == nil {
			return apierrors.NewNotFound(leasesResource, name)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (f *fakeLeases) Create(_ context.Context, l *coordinationv1.Lease, _ metav1.CreateOptions) (*coordinationv1.Lease, error) {
	var out *coordinationv1.Lease
	err := f.call("create", l.Name, func() error {
		f.s.mu.Lock()
		defer f.s.mu.Unlock()
		if _, ok := f.s.items[l.Name]; ok {
			return apierrors.NewAlreadyExists(leasesResource, l.Name)
		}
		n := l.DeepCopy()
		n.Namespace = f.s.ns
		n.UID = types.UID("uid-" + l.Name + "-" + strconv.FormatInt(f.s.rv, 10))
		n.ResourceVersion = f.s.nextLocked()
		f.s.items[n.Name] = n
		f.s.emitLocked(watch.Added, n)
		out = n.DeepCopy()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (f *fakeLeases) Update(_ context.Context, l *coordinationv1.Lease, _ metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	var out *coordinationv1.Lease
	err := f.call("update", l.Name, func() error {
		f.s.mu.Lock()
		defer f.s.mu.Unlock()
		old, ok := f.s.items[l.Name]
		switch {
		case !ok:
			return apierrors.NewNotFound(leasesResource, l.Name)
		case old.ResourceVersion != l.ResourceVersion:
			return apierrors.NewConflict(leasesResource, l.Name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		}
		n := l.DeepCopy()
		n.Namespace, n.UID = f.s.ns, old.UID
		n.ResourceVersion = f.s.nextLocked()
		f.s.items[n.Name] = n
		f.s.emitLocked(watch.Modified, n)
		out = n.DeepCopy()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (f *fakeLeases) Delete(_ context.Context, name string, opts metav1.DeleteOptions) error {
	return f.call("delete", name, func() error {
		f.s.mu.Lock()
		defer f.s.mu.Unlock()
		old, ok := f.s.items[name]
		switch {
		case !ok:
			return apierrors.NewNotFound(leasesResource, name)
		case opts.Preconditions != nil && opts.Preconditions.ResourceVersion != nil && *opts.Preconditions.ResourceVersion != old.ResourceVersion:
			return apierrors.NewConflict(leasesResource, name, errors.New("precondition failed"))
		}
		delete(f.s.items, name)
		gone := old.DeepCopy()
		gone.ResourceVersion = f.s.nextLocked()
		f.s.emitLocked(watch.Deleted, gone)
		return nil
	})
}

func (f *fakeLeases) List(_ context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	sel, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return nil, err
	}
	var out *coordinationv1.LeaseList
	err = f.call("list", "", func() error {
		f.s.mu.Lock()
		defer f.s.mu.Unlock()
		out = &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(f.s.rv, 10)}}
		for _, l := range f.s.items {
			if sel.Matches(labels.Set(l.Labels)) {
				out.Items = append(out.Items, *l.DeepCopy())
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (f *fakeLeases) Watch(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	sel, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return nil, err
	}
	from, _ := strconv.ParseInt(opts.ResourceVersion, 10, 64)
	var w *fakeWatch
	err = f.call("watch", "", func() error {
		f.s.mu.Lock()
		defer f.s.mu.Unlock()
		w = &fakeWatch{s: f.s, sel: sel, ch: make(chan watch.Event, 1024), done: make(chan struct{})}
		for _, ev := range f.s.log {
			if rv, _ := strconv.ParseInt(ev.Object.(*coordinationv1.Lease).ResourceVersion, 10, 64); rv > from {
				w.send(ev)
			}
		}
		f.s.watchers[w] = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	return w, nil
}

// breakWatches ends every watch, as a broken connection does.
func (s *store) breakWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watchers {
		delete(s.watchers, w)
		w.closeLocked()
	}
}

type fakeWatch struct {
	s    *store
	sel  labels.Selector
	ch   chan watch.Event
	done chan struct{}
	once sync.Once
}

// send is called with the store's lock held.
func (w *fakeWatch) send(ev watch.Event) {
	if !w.sel.Matches(labels.Set(ev.Object.(*coordinationv1.Lease).Labels)) {
		return
	}
	select {
	case w.ch <- ev:
	case <-w.done:
	}
}

func (w *fakeWatch) closeLocked() { w.once.Do(func() { close(w.done); close(w.ch) }) }

func (w *fakeWatch) Stop() {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	delete(w.s.watchers, w)
	w.closeLocked()
}

func (w *fakeWatch) ResultChan() <-chan watch.Event { return w.ch }
