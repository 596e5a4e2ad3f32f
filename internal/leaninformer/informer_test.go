package leaninformer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/test"
)

const testNS = "ns"

// impl builds an informer of ConfigMaps: client-go's or this package's.
type impl struct {
	name string
	new  func(lw toolscache.ListerWatcher, resync time.Duration) toolscache.SharedIndexInformer
}

var impls = []impl{
	{"client-go", func(lw toolscache.ListerWatcher, resync time.Duration) toolscache.SharedIndexInformer {
		return toolscache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, resync, toolscache.Indexers{})
	}},
	{"lean", func(lw toolscache.ListerWatcher, resync time.Duration) toolscache.SharedIndexInformer {
		return New(lw, &corev1.ConfigMap{}, resync, toolscache.Indexers{})
	}},
}

// fakeServer lists and watches the ConfigMaps of one namespace as an API
// server would (resource versions, watches resumed from one, expiry,
// bookmarks, optionally watch-list), with no goroutine of its own.
type fakeServer struct {
	watchList bool // serves watch-list requests (streamed initial lists)

	mu         sync.Mutex
	rv         int
	objs       map[string]*corev1.ConfigMap // by name
	history    []watch.Event
	watchers   map[*fakeWatch]struct{}
	listErr    error
	lists      []time.Time
	watches    int
	watchLists int
}

func newFakeServer(names ...string) *fakeServer {
	s := &fakeServer{objs: map[string]*corev1.ConfigMap{}, watchers: map[*fakeWatch]struct{}{}}
	for _, n := range names {
		s.set(n, "0", true)
	}
	return s
}

// IsWatchListSemanticsUnSupported tells reflectors whether to try watch-list.
func (s *fakeServer) IsWatchListSemanticsUnSupported() bool { return !s.watchList }

func (s *fakeServer) sortedLocked() []*corev1.ConfigMap {
	out := make([]*corev1.ConfigMap, 0, len(s.objs))
	for _, name := range slices.Sorted(maps.Keys(s.objs)) {
		out = append(out, s.objs[name])
	}
	return out
}

// List returns the objects sorted by name.
func (s *fakeServer) List(metav1.ListOptions) (kruntime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lists = append(s.lists, time.Now())
	if s.listErr != nil {
		return nil, s.listErr
	}
	l := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(s.rv)}}
	for _, cm := range s.sortedLocked() {
		l.Items = append(l.Items, *cm.DeepCopy())
	}
	return l, nil
}

// Watch starts a watch: from a resource version, with the changes after
// it, or, for watch-list, with the objects as adds and a bookmark.
func (s *fakeServer) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &fakeWatch{s: s, ch: make(chan watch.Event, 1<<15)}
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		s.watchLists++
		for _, cm := range s.sortedLocked() {
			w.send(watch.Event{Type: watch.Added, Object: cm})
		}
		w.send(watch.Event{Type: watch.Bookmark, Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			ResourceVersion: strconv.Itoa(s.rv),
			Annotations:     map[string]string{metav1.InitialEventsAnnotationKey: "true"},
		}}})
	} else {
		s.watches++
		from, err := strconv.Atoi(opts.ResourceVersion)
		if err != nil {
			return nil, apierrors.NewBadRequest("resourceVersion " + opts.ResourceVersion)
		}
		for _, e := range s.history {
			if rvNum(e.Object) > from {
				w.send(e)
			}
		}
	}
	s.watchers[w] = struct{}{}
	return w, nil
}

// set creates or updates a ConfigMap. Unless notify, open watches miss the
// change, as if they had dropped it.
func (s *fakeServer) set(name, value string, notify bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	typ := watch.Modified
	if _, ok := s.objs[name]; !ok {
		typ = watch.Added
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: types.UID(name), ResourceVersion: strconv.Itoa(s.rv)},
		Data:       map[string]string{"v": value},
	}
	s.objs[name] = cm
	s.recordLocked(watch.Event{Type: typ, Object: cm}, notify)
}

// remove deletes a ConfigMap, if there is one.
func (s *fakeServer) remove(name string, notify bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cm, ok := s.objs[name]
	if !ok {
		return
	}
	s.rv++
	cm = cm.DeepCopy()
	cm.ResourceVersion = strconv.Itoa(s.rv)
	delete(s.objs, name)
	s.recordLocked(watch.Event{Type: watch.Deleted, Object: cm}, notify)
}

// phantomDelete sends a delete of an object that never existed.
func (s *fakeServer) phantomDelete(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, ResourceVersion: strconv.Itoa(s.rv)}}
	s.recordLocked(watch.Event{Type: watch.Deleted, Object: cm}, true)
}

func (s *fakeServer) recordLocked(e watch.Event, notify bool) {
	s.history = append(s.history, e)
	if notify {
		for w := range s.watchers {
			w.send(e)
		}
	}
}

// bookmark sends a bookmark at a new resource version, as for writes the
// watches do not select, and returns it.
func (s *fakeServer) bookmark() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv += 10
	rv := strconv.Itoa(s.rv)
	for w := range s.watchers {
		w.send(watch.Event{Type: watch.Bookmark, Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}}})
	}
	return rv
}

// expireWatches ends every watch with a 410 Expired error: watchers list
// again.
func (s *fakeServer) expireWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	status := apierrors.NewResourceExpired("too old resource version").Status()
	for w := range s.watchers {
		w.send(watch.Event{Type: watch.Error, Object: &status})
		w.closeLocked()
	}
}

func (s *fakeServer) setListErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listErr = err
}

// counts returns how many lists, watches and watch-lists were served, and
// how many watches are open.
func (s *fakeServer) counts() (lists, watches, watchLists, open int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lists), s.watches, s.watchLists, len(s.watchers)
}

func (s *fakeServer) listTimes() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lists)
}

// names returns the names of the objects.
func (s *fakeServer) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.objs))
}

// snapshot maps each object's key to its resourceVersion.
func (s *fakeServer) snapshot() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for name, cm := range s.objs {
		out[testNS+"/"+name] = cm.ResourceVersion
	}
	return out
}

// fakeWatch is a watch of a fakeServer, buffered so that the server never
// waits for its reader.
type fakeWatch struct {
	s      *fakeServer
	ch     chan watch.Event
	closed bool // guarded by s.mu
}

func (w *fakeWatch) ResultChan() <-chan watch.Event { return w.ch }

func (w *fakeWatch) Stop() {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.closeLocked()
}

func (w *fakeWatch) closeLocked() {
	if !w.closed {
		w.closed = true
		close(w.ch)
		delete(w.s.watchers, w)
	}
}

func (w *fakeWatch) send(e watch.Event) {
	if w.closed {
		return
	}
	select {
	case w.ch <- watch.Event{Type: e.Type, Object: e.Object.DeepCopyObject()}:
	default:
		panic("fakeWatch: buffer full")
	}
}

func rvOf(obj any) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return "?"
	}
	return m.GetResourceVersion()
}

func rvNum(obj any) int {
	n, _ := strconv.Atoi(rvOf(obj))
	return n
}

// storeRVs maps each key in the informer's store to its resourceVersion.
func storeRVs(inf toolscache.SharedIndexInformer) map[string]string {
	out := map[string]string{}
	for _, obj := range inf.GetStore().List() {
		key, _ := toolscache.MetaNamespaceKeyFunc(obj)
		out[key] = rvOf(obj)
	}
	return out
}

// recorder is a handler that rebuilds the store from its events and notes
// every event that does not follow from those before it.
type recorder struct {
	name     string
	reg      atomic.Value // toolscache.ResourceEventHandlerRegistration
	removed  atomic.Bool  // set once RemoveEventHandler returned
	annotate string       // an annotation every object must carry, if set
	slowAdds bool         // it takes a while over each initial add
	hook     func(r *recorder, n int, event string)

	mu         sync.Mutex
	state      map[string]*corev1.ConfigMap
	log        []string
	problems   []string
	nonInitial bool // it has seen an event other than an initial add
	events     int
	initial    int // adds in the initial list
	adds       int // other adds
	updates    int // updates that change the resourceVersion
	unchanged  int // updates that do not, from a relist
	resyncs    int // updates of an object to itself
	deletes    int
	tombstones int // DeletedFinalStateUnknown
	unknown    int // deletes of objects it never had
	late       int // events begun after it was removed
}

func newRecorder(name string) *recorder {
	return &recorder{name: name, state: map[string]*corev1.ConfigMap{}}
}

func (r *recorder) registration() toolscache.ResourceEventHandlerRegistration {
	reg, _ := r.reg.Load().(toolscache.ResourceEventHandlerRegistration)
	return reg
}

// register adds r to inf, with resync as its resync period if not nil.
func (r *recorder) register(t *testing.T, inf toolscache.SharedIndexInformer, resync *time.Duration) {
	t.Helper()
	reg, err := inf.AddEventHandlerWithOptions(r, toolscache.HandlerOptions{ResyncPeriod: resync})
	if err != nil {
		t.Errorf("adding handler %s: %v", r.name, err)
		return
	}
	r.reg.Store(reg)
}

// unregister removes r from inf.
func (r *recorder) unregister(t *testing.T, inf toolscache.SharedIndexInformer) {
	t.Helper()
	if err := inf.RemoveEventHandler(r.registration()); err != nil {
		t.Errorf("removing handler %s: %v", r.name, err)
	}
	r.removed.Store(true)
}

func (r *recorder) problemf(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

// begin locks r and counts an event; end unlocks it and calls the hook.
func (r *recorder) begin() {
	late := r.removed.Load()
	r.mu.Lock()
	r.events++
	if late {
		r.late++
	}
}

func (r *recorder) end(event string) {
	r.log = append(r.log, event)
	n := r.events
	r.mu.Unlock()
	if r.hook != nil {
		r.hook(r, n, event)
	}
}

func (r *recorder) check(obj any) *corev1.ConfigMap {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		r.problemf("object of type %T", obj)
		return &corev1.ConfigMap{}
	}
	if r.annotate != "" && cm.Annotations[r.annotate] == "" {
		r.problemf("%s at %s lacks annotation %s", cm.Name, cm.ResourceVersion, r.annotate)
	}
	return cm
}

func (r *recorder) OnAdd(obj any, isInInitialList bool) {
	r.begin()
	cm := r.check(obj)
	key, _ := toolscache.MetaNamespaceKeyFunc(cm)
	event := fmt.Sprintf("add %s %s", cm.Name, cm.ResourceVersion)
	if isInInitialList {
		if r.slowAdds {
			time.Sleep(100 * time.Microsecond)
		}
		r.initial++
		event += " initial"
		if r.nonInitial {
			r.problemf("initial add of %s after other events", key)
		}
		if reg := r.registration(); reg != nil && reg.HasSynced() {
			r.problemf("initial add of %s after HasSynced", key)
		}
	} else {
		r.adds++
		r.nonInitial = true
	}
	if _, ok := r.state[key]; ok {
		r.problemf("add of %s, which it has", key)
	}
	r.state[key] = cm
	r.end(event)
}

func (r *recorder) OnUpdate(oldObj, newObj any) {
	r.begin()
	r.nonInitial = true
	oldCM, newCM := r.check(oldObj), r.check(newObj)
	key, _ := toolscache.MetaNamespaceKeyFunc(newCM)
	if oldKey, _ := toolscache.MetaNamespaceKeyFunc(oldCM); oldKey != key {
		r.problemf("update from %s to %s", oldKey, key)
	}
	switch cur, ok := r.state[key]; {
	case !ok:
		r.problemf("update of %s, which it does not have", key)
	case cur.ResourceVersion != oldCM.ResourceVersion:
		r.problemf("update of %s from %s, but it has %s", key, oldCM.ResourceVersion, cur.ResourceVersion)
	}
	if rvNum(newCM) < rvNum(oldCM) {
		r.problemf("update of %s from %s back to %s", key, oldCM.ResourceVersion, newCM.ResourceVersion)
	}
	event := fmt.Sprintf("update %s %s->%s", newCM.Name, oldCM.ResourceVersion, newCM.ResourceVersion)
	switch {
	case oldObj == newObj:
		r.resyncs++
		event = fmt.Sprintf("resync %s %s", newCM.Name, newCM.ResourceVersion)
	case oldCM.ResourceVersion == newCM.ResourceVersion:
		r.unchanged++
		event = fmt.Sprintf("unchanged %s %s", newCM.Name, newCM.ResourceVersion)
	default:
		r.updates++
	}
	r.state[key] = newCM
	r.end(event)
}

func (r *recorder) OnDelete(obj any) {
	r.begin()
	r.nonInitial = true
	var event string
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		r.tombstones++
		cm := r.check(d.Obj)
		event = fmt.Sprintf("tombstone %s %s", cm.Name, cm.ResourceVersion)
		if cur, ok := r.state[d.Key]; !ok {
			r.problemf("tombstone of %s, which it does not have", d.Key)
		} else if cur.ResourceVersion != cm.ResourceVersion {
			r.problemf("tombstone of %s at %s, but it has %s", d.Key, cm.ResourceVersion, cur.ResourceVersion)
		}
		delete(r.state, d.Key)
	} else {
		cm := r.check(obj)
		key, _ := toolscache.MetaNamespaceKeyFunc(cm)
		event = fmt.Sprintf("delete %s %s", cm.Name, cm.ResourceVersion)
		if _, ok := r.state[key]; ok {
			r.deletes++
		} else {
			r.unknown++
		}
		delete(r.state, key)
	}
	r.end(event)
}

// matches reports whether r holds what want maps keys to resourceVersions.
func (r *recorder) matches(want map[string]string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.state) != len(want) {
		return false
	}
	for key, cm := range r.state {
		if want[key] != cm.ResourceVersion {
			return false
		}
	}
	return true
}

func (r *recorder) snapshot() recorder {
	r.mu.Lock()
	defer r.mu.Unlock()
	return recorder{
		name: r.name, log: slices.Clone(r.log), problems: slices.Clone(r.problems),
		events: r.events, initial: r.initial, adds: r.adds, updates: r.updates, unchanged: r.unchanged,
		resyncs: r.resyncs, deletes: r.deletes, tombstones: r.tombstones, unknown: r.unknown, late: r.late,
	}
}

func (r *recorder) String() string {
	s := r.snapshot()
	return fmt.Sprintf("%s: %d events (%d initial adds, %d adds, %d updates, %d unchanged, %d resyncs, %d deletes, %d tombstones, %d unknown deletes, %d late)",
		s.name, s.events, s.initial, s.adds, s.updates, s.unchanged, s.resyncs, s.deletes, s.tombstones, s.unknown, s.late)
}

// noProblems fails t with whatever r found wrong.
func (r *recorder) noProblems(t *testing.T) {
	t.Helper()
	for _, p := range r.snapshot().problems {
		t.Errorf("%s: %s", r.name, p)
	}
}

// logSince returns r's events after the first that is after.
func (r *recorder) logSince(after string) []string {
	log := r.snapshot().log
	if i := slices.Index(log, after); i >= 0 {
		return log[i+1:]
	}
	return nil
}

// waitFor polls cond until it holds, failing t after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// run runs inf until stop is called or the test ends; stop cancels the
// run and waits for it to return.
func run(t *testing.T, inf toolscache.SharedIndexInformer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Error("informer did not stop within 10s")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// runSynced runs inf and waits for it to sync.
func runSynced(t *testing.T, inf toolscache.SharedIndexInformer) {
	t.Helper()
	run(t, inf)
	waitFor(t, 5*time.Second, "informer synced", inf.HasSynced)
}

func closed(ch <-chan struct{}) func() bool {
	return func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
}

// churn is one informer of TestMatchesClientGoUnderChurn with its handlers.
type churn struct {
	impl
	inf      toolscache.SharedIndexInformer
	preStart []*recorder

	mu            sync.Mutex
	live, removed []*recorder
}

func (c *churn) add(t *testing.T, r *recorder, resync *time.Duration) {
	r.register(t, c.inf, resync)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.live = append(c.live, r)
}

func (c *churn) remove(t *testing.T, r *recorder) {
	r.unregister(t, c.inf)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.live = slices.DeleteFunc(c.live, func(o *recorder) bool { return o == r })
	c.removed = append(c.removed, r)
}

// changes drops the updates that do not change the resourceVersion (resyncs
// and relists of unchanged objects), which depend on when resyncs are due,
// and sorts each run of tombstones, which both informers deliver in the
// order of a map.
func changes(log []string) []string {
	out := slices.DeleteFunc(slices.Clone(log), func(e string) bool {
		return strings.HasPrefix(e, "resync ") || strings.HasPrefix(e, "unchanged ")
	})
	for i := 0; i < len(out); {
		j := i
		for j < len(out) && strings.HasPrefix(out[j], "tombstone ") {
			j++
		}
		slices.Sort(out[i:j])
		i = j + 1
	}
	return out
}

// TestMatchesClientGoUnderChurn feeds client-go's informer and this one the
// same random adds, updates and deletes, a delete of an object that never
// existed and a watch that expires while objects change, while handlers
// are added and removed from several goroutines and from inside a
// callback. Both are checked the same way: each handler's events are valid
// one after the other, a handler that stays ends with the store, which
// ends with the server, and the handlers added before the start saw the
// same changes, in the same order, from either informer.
func TestMatchesClientGoUnderChurn(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	const total, names = 2000, 40
	nameOf := func(i int) string { return fmt.Sprintf("cm-%02d", i) }
	initial := make([]string, 0, names/2)
	for i := range names / 2 {
		initial = append(initial, nameOf(i))
	}
	srv := newFakeServer(initial...)
	none, slow := time.Duration(0), 3*time.Second
	resyncs := []*time.Duration{nil, &none, &slow}

	churns := make([]*churn, 0, len(impls))
	for _, im := range impls {
		c := &churn{impl: im, inf: im.new(srv, time.Second)}
		for i, resync := range resyncs {
			r := newRecorder(fmt.Sprintf("pre-start-%d", i))
			c.add(t, r, resync)
			c.preStart = append(c.preStart, r)
		}
		// The spawner adds a handler from inside a callback, then removes it.
		spawner := newRecorder("spawner")
		var spawned *recorder
		changesSeen := 0
		spawner.hook = func(_ *recorder, _ int, event string) {
			if strings.HasPrefix(event, "resync ") || strings.HasPrefix(event, "unchanged ") {
				return
			}
			changesSeen++
			switch changesSeen {
			case 150:
				spawned = newRecorder("spawned")
				c.add(t, spawned, nil)
			case 900:
				c.remove(t, spawned)
			}
		}
		c.add(t, spawner, nil)
		c.preStart = append(c.preStart, spawner)
		churns = append(churns, c)
	}
	for _, c := range churns {
		runSynced(t, c.inf)
	}

	var progress atomic.Int64
	var wg sync.WaitGroup
	for _, c := range churns {
		for g := range 3 {
			rng := rand.New(rand.NewPCG(seed, uint64(g+1)))
			targets := make([]int64, 6)
			for j := range targets {
				targets[j] = rng.Int64N(total)
			}
			slices.Sort(targets)
			wg.Go(func() {
				mine := make([]*recorder, 0, len(targets))
				for j, target := range targets {
					for progress.Load() < target {
						time.Sleep(100 * time.Microsecond)
					}
					r := newRecorder(fmt.Sprintf("g%d-%d", g, j))
					r.slowAdds = j%2 == 0 // a slow replay overlaps more events
					c.add(t, r, resyncs[rng.IntN(len(resyncs))])
					mine = append(mine, r)
					if victim := mine[rng.IntN(len(mine))]; rng.IntN(3) == 0 && !victim.removed.Load() {
						c.remove(t, victim)
					}
				}
			})
		}
	}

	rng := rand.New(rand.NewPCG(seed, 0))
	randomChange := func(op int) {
		name := nameOf(rng.IntN(names))
		if slices.Contains(srv.names(), name) && rng.IntN(4) == 0 {
			srv.remove(name, true)
		} else {
			srv.set(name, strconv.Itoa(op), true)
		}
	}
	for op := range total {
		switch op {
		case 300:
			srv.phantomDelete("phantom")
		case 600:
			lists, _, _, _ := srv.counts()
			srv.expireWatches()
			// While the informers wait to list again, delete objects they
			// have (tombstones follow) and change others.
			for _, name := range srv.names()[:3] {
				srv.remove(name, true)
			}
			for range 20 {
				left := srv.names()
				srv.set(left[rng.IntN(len(left))], strconv.Itoa(op), true)
			}
			waitFor(t, 5*time.Second, "both informers to list again", func() bool {
				l, _, _, _ := srv.counts()
				return l >= lists+len(churns)
			})
		default:
			randomChange(op)
		}
		progress.Store(int64(op + 1))
		switch {
		case op > 600:
			// Slower after the relist, so that resyncs (a second after the
			// watch starts) come among the changes and handler churn.
			time.Sleep(time.Millisecond)
		case op%4 == 0:
			time.Sleep(50 * time.Microsecond)
		}
	}
	wg.Wait()

	want := srv.snapshot()
	for _, c := range churns {
		waitFor(t, 10*time.Second, c.name+" store to match the server", func() bool { return maps.Equal(storeRVs(c.inf), want) })
		c.mu.Lock()
		live, removed := slices.Clone(c.live), slices.Clone(c.removed)
		c.mu.Unlock()
		for _, r := range live {
			waitFor(t, 10*time.Second, c.name+" "+r.name+" to match the store", func() bool { return r.matches(want) })
			waitFor(t, 5*time.Second, c.name+" "+r.name+" to have synced", r.registration().HasSynced)
		}
		for _, r := range slices.Concat(live, removed) {
			r.noProblems(t)
		}
		for _, r := range removed {
			// client-go hands a removed handler what its buffer holds
			// (RemoveEventHandler is asynchronous there); this informer
			// at most the event it had begun to deliver.
			late := r.snapshot().late
			if _, lean := c.inf.(*Informer); lean && late > 1 {
				t.Errorf("%s %s: %d events began after it was removed, want at most the one under way", c.name, r.name, late)
			} else if late > 0 {
				t.Logf("%s %s: %d events began after it was removed", c.name, r.name, late)
			}
		}
		for _, r := range c.preStart {
			s := r.snapshot()
			if s.unknown != 1 {
				t.Errorf("%s %s: %d deletes of unknown objects, want 1 (the phantom)", c.name, r.name, s.unknown)
			}
			if s.tombstones < 3 {
				t.Errorf("%s %s: %d tombstones, want at least the 3 objects deleted while the watch was down", c.name, r.name, s.tombstones)
			}
			if s.initial != len(initial) {
				t.Errorf("%s %s: %d adds in the initial list, want %d", c.name, r.name, s.initial, len(initial))
			}
		}
		t.Logf("%s: %d live handlers, %d removed; %v", c.name, len(live), len(removed), c.preStart[0])
	}
	for i := range churns[0].preStart {
		cg, lean := churns[0].preStart[i], churns[1].preStart[i]
		if a, b := changes(cg.snapshot().log), changes(lean.snapshot().log); !slices.Equal(a, b) {
			i := 0
			for i < min(len(a), len(b)) && a[i] == b[i] {
				i++
			}
			from := max(0, i-3)
			t.Errorf("%s: client-go and lean delivered different changes (%d and %d) from #%d:\n%q\n%q",
				cg.name, len(a), len(b), i, a[from:min(len(a), i+5)], b[from:min(len(b), i+5)])
		}
	}
}

// TestStress runs this informer with a fake clock stepped as fast as the
// informer rearms its resync timer, so that resyncs overlap watch events
// and handlers joining (with slow replays) and leaving from several
// goroutines, and checks every handler as TestMatchesClientGoUnderChurn
// does.
func TestStress(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	const total, names, maxLive = 3000, 30, 16
	nameOf := func(i int) string { return fmt.Sprintf("cm-%02d", i) }
	srv := newFakeServer(nameOf(0), nameOf(1), nameOf(2))
	clk := clocktesting.NewFakeClock(time.Now())
	c := &churn{impl: impls[1], inf: newInformer(srv, &corev1.ConfigMap{}, time.Second, nil, clk)}
	for i := range 3 {
		c.add(t, newRecorder(fmt.Sprintf("pre-start-%d", i)), nil)
	}
	runSynced(t, c.inf)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // resync as often as the informer lets it
		for {
			select {
			case <-stop:
				return
			default:
			}
			if clk.HasWaiters() {
				clk.Step(time.Second)
			}
			goruntime.Gosched()
		}
	})
	var progress atomic.Int64
	var adders sync.WaitGroup
	for g := range 4 {
		rng := rand.New(rand.NewPCG(seed, uint64(g+1)))
		adders.Go(func() {
			var mine []*recorder
			for j := 0; progress.Load() < total; j++ {
				r := newRecorder(fmt.Sprintf("g%d-%d", g, j))
				r.slowAdds = rng.IntN(4) == 0
				c.add(t, r, nil)
				mine = append(mine, r)
				if victim := mine[rng.IntN(len(mine))]; rng.IntN(2) == 0 && !victim.removed.Load() {
					c.remove(t, victim)
				}
				// However slow the run (the race detector), at most
				// maxLive of its handlers stay: the churn, not the
				// number of handlers, is what this attacks.
				if live := slices.DeleteFunc(slices.Clone(mine), func(r *recorder) bool { return r.removed.Load() }); len(live) > maxLive {
					c.remove(t, live[rng.IntN(len(live))])
				}
				time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
			}
		})
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	for op := range total {
		name := nameOf(rng.IntN(names))
		if slices.Contains(srv.names(), name) && rng.IntN(3) == 0 {
			srv.remove(name, true)
		} else {
			srv.set(name, strconv.Itoa(op), true)
		}
		progress.Store(int64(op + 1))
		if op%8 == 0 {
			goruntime.Gosched()
		}
	}
	adders.Wait()
	close(stop)
	wg.Wait()

	want := srv.snapshot()
	waitFor(t, 10*time.Second, "the store to match the server", func() bool { return maps.Equal(storeRVs(c.inf), want) })
	resyncs := 0
	for _, r := range c.live {
		waitFor(t, 10*time.Second, r.name+" to match the store", func() bool { return r.matches(want) })
		resyncs += r.snapshot().resyncs
	}
	for _, r := range slices.Concat(c.live, c.removed) {
		r.noProblems(t)
		if late := r.snapshot().late; late > 1 {
			t.Errorf("%s: %d events began after it was removed, want at most the one under way", r.name, late)
		}
	}
	t.Logf("%d live handlers, %d removed, %d resyncs among those live", len(c.live), len(c.removed), resyncs)
}

// TestRelist ends the watch after changes it did not carry: the relist
// that follows delivers a tombstone for the object gone, updates for the
// others (to every handler, as none has been told it is not due for a
// resync), and an add outside the initial list for the new one, to a
// handler added before the start and to one added after it synced, from
// client-go's informer and this one alike (run side by side).
func TestRelist(t *testing.T) {
	t.Parallel()
	type side struct {
		impl
		srv         *fakeServer
		inf         toolscache.SharedIndexInformer
		early, late *recorder
	}
	sides := make([]*side, 0, 2*len(impls))
	for _, im := range impls {
		r := &side{impl: im, srv: newFakeServer("a", "b", "c", "d"), early: newRecorder(im.name + " early"), late: newRecorder(im.name + " late")}
		r.inf = im.new(r.srv, 0)
		r.early.register(t, r.inf, nil)
		runSynced(t, r.inf)
		r.late.register(t, r.inf, nil)
		r.srv.set("e", "1", true) // 5
		sides = append(sides, r)
	}
	for _, r := range sides {
		for _, rec := range []*recorder{r.early, r.late} {
			waitFor(t, 5*time.Second, rec.name+" to get e", func() bool { return slices.Contains(rec.snapshot().log, "add e 5") })
		}
		r.srv.remove("a", false)   // 6
		r.srv.set("b", "2", false) // 7
		r.srv.set("f", "1", false) // 8
		r.srv.expireWatches()
	}
	wantLog := []string{"tombstone a 1", "update b 2->7", "unchanged c 3", "unchanged d 4", "unchanged e 5", "add f 8"}
	for _, r := range sides {
		want := r.srv.snapshot()
		waitFor(t, 5*time.Second, r.name+" store to match the server", func() bool { return maps.Equal(storeRVs(r.inf), want) })
		for _, rec := range []*recorder{r.early, r.late} {
			waitFor(t, 5*time.Second, rec.name+" to match the store", func() bool { return rec.matches(want) })
			rec.noProblems(t)
			if got := rec.logSince("add e 5"); !slices.Equal(got, wantLog) {
				t.Errorf("%s: after the relist got %q, want %q", rec.name, got, wantLog)
			}
			if s := rec.snapshot(); s.initial != 4 {
				t.Errorf("%s: %d adds in the initial list, want 4", rec.name, s.initial)
			}
		}
	}
}

// TestRelistSkipsHandlersNotDue: once a resync check found a handler not
// due, a relist's unchanged objects do not reach it; changed, gone and new
// ones do.
func TestRelistSkipsHandlersNotDue(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Now())
	srv := newFakeServer("a", "b", "c")
	inf := newInformer(srv, &corev1.ConfigMap{}, 2*time.Second, nil, clk)
	due, notDue := newRecorder("due"), newRecorder("not due")
	every2s, every4s := 2*time.Second, 4*time.Second
	due.register(t, inf, &every2s)
	notDue.register(t, inf, &every4s)
	runSynced(t, inf)
	stepResync(t, clk, inf, 2*time.Second)
	if d, n := due.snapshot().resyncs, notDue.snapshot().resyncs; d != 3 || n != 0 {
		t.Fatalf("resyncs at 2s: due %d, not due %d; want 3 and 0", d, n)
	}
	srv.remove("a", false)   // 4
	srv.set("b", "2", false) // 5
	srv.set("d", "1", false) // 6
	srv.expireWatches()
	want := srv.snapshot()
	waitFor(t, 5*time.Second, "the store to match the server", func() bool { return maps.Equal(storeRVs(inf), want) })
	for r, wantLog := range map[*recorder][]string{
		due:    {"tombstone a 1", "update b 2->5", "unchanged c 3", "add d 6"},
		notDue: {"tombstone a 1", "update b 2->5", "add d 6"},
	} {
		waitFor(t, 5*time.Second, r.name+" to match the store", func() bool { return r.matches(want) })
		r.noProblems(t)
		got := slices.DeleteFunc(r.snapshot().log, func(e string) bool {
			return strings.HasSuffix(e, " initial") || strings.HasPrefix(e, "resync ")
		})
		if !slices.Equal(got, wantLog) {
			t.Errorf("%s: after the relist got %q, want %q", r.name, got, wantLog)
		}
	}
}

// stepResync advances clk by d once the informer waits for its resync
// timer, and waits for the resync that follows, if any, to be delivered.
func stepResync(t *testing.T, clk *clocktesting.FakeClock, inf *Informer, d time.Duration) {
	t.Helper()
	waitFor(t, 5*time.Second, "the resync timer", clk.HasWaiters)
	clk.Step(d)
	waitFor(t, 5*time.Second, "the resync to be queued", clk.HasWaiters)
	waitFor(t, 5*time.Second, "the resync to be delivered", inf.idle)
}

// TestResync steps a fake clock and checks which handlers get their
// resync (an update of each object to itself) at each check, following
// client-go's rules: a handler's period is at least a second; before the
// start a period shorter than the informer's check period shortens it,
// after the start it is raised to it; zero is never.
func TestResync(t *testing.T) {
	t.Parallel()
	dur := func(d time.Duration) *time.Duration { return &d }
	type handler struct {
		name         string
		resync       *time.Duration // nil: the informer's default
		afterStart   bool
		removedAfter int // rounds after which it is removed, if not 0
	}
	for _, tc := range []struct {
		name     string
		resync   time.Duration
		step     time.Duration
		handlers []handler
		due      [][]string // per step, the handlers resynced
	}{{
		name:   "check period shortened before start",
		resync: 10 * time.Second,
		step:   4 * time.Second,
		handlers: []handler{
			{name: "default"},
			{name: "4s", resync: dur(4 * time.Second)},
			{name: "zero", resync: dur(0)},
			{name: "removed", resync: dur(4 * time.Second), removedAfter: 1},
			{name: "late 1.5s", resync: dur(1500 * time.Millisecond), afterStart: true},
			{name: "late 6s", resync: dur(6 * time.Second), afterStart: true},
		},
		due: [][]string{
			{"4s", "removed", "late 1.5s"},            // 4s
			{"4s", "late 1.5s", "late 6s"},            // 8s
			{"default", "4s", "late 1.5s"},            // 12s
			{"4s", "late 1.5s", "late 6s"},            // 16s
			{"4s", "late 1.5s"},                       // 20s
			{"default", "4s", "late 1.5s", "late 6s"}, // 24s
		},
	}, {
		name:   "minimum period",
		resync: 10 * time.Second,
		step:   time.Second,
		handlers: []handler{
			{name: "300ms", resync: dur(300 * time.Millisecond)},
			{name: "default"},
			{name: "late 200ms", resync: dur(200 * time.Millisecond), afterStart: true},
		},
		due: [][]string{
			{"300ms", "late 200ms"}, {"300ms", "late 200ms"}, {"300ms", "late 200ms"}, {"300ms", "late 200ms"}, {"300ms", "late 200ms"},
			{"300ms", "late 200ms"}, {"300ms", "late 200ms"}, {"300ms", "late 200ms"}, {"300ms", "late 200ms"},
			{"300ms", "late 200ms", "default"}, // 10s
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clocktesting.NewFakeClock(time.Now())
			srv := newFakeServer("a", "b", "c")
			inf := newInformer(srv, &corev1.ConfigMap{}, tc.resync, nil, clk)
			recs := map[string]*recorder{}
			for _, h := range tc.handlers {
				if !h.afterStart {
					recs[h.name] = newRecorder(h.name)
					recs[h.name].register(t, inf, h.resync)
				}
			}
			runSynced(t, inf)
			for _, h := range tc.handlers {
				if h.afterStart {
					recs[h.name] = newRecorder(h.name)
					recs[h.name].register(t, inf, h.resync)
				}
			}
			before := map[string]int{}
			for round, due := range tc.due {
				stepResync(t, clk, inf, tc.step)
				for name, r := range recs {
					got := r.snapshot().resyncs - before[name]
					before[name] += got
					if want := map[bool]int{true: 3}[slices.Contains(due, name)]; got != want {
						t.Errorf("at %v: %s got %d resyncs, want %d", time.Duration(round+1)*tc.step, name, got, want)
					}
				}
				for _, h := range tc.handlers {
					if h.removedAfter == round+1 {
						recs[h.name].unregister(t, inf)
					}
				}
			}
			for _, r := range recs {
				r.noProblems(t)
			}
		})
	}
}

// TestWatchErrors: a list the server forbids goes to the watch error
// handler, attempts back off as client-go's reflector does (800ms, then
// twice that, with jitter up to as much again), the informer does not
// sync, and the transform and the error handler can no longer be set.
// client-go's informer and this one run side by side.
func TestWatchErrors(t *testing.T) {
	t.Parallel()
	type side struct {
		impl
		srv  *fakeServer
		inf  toolscache.SharedIndexInformer
		reg  toolscache.ResourceEventHandlerRegistration
		mu   sync.Mutex
		errs []error
	}
	sides := make([]*side, 0, 2*len(impls))
	for _, im := range impls {
		r := &side{impl: im, srv: newFakeServer("a")}
		r.srv.setListErr(apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no RBAC rule")))
		r.inf = im.new(r.srv, 0)
		if err := r.inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *toolscache.Reflector, err error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.errs = append(r.errs, err)
		}); err != nil {
			t.Fatalf("%s: SetWatchErrorHandlerWithContext before start: %v", im.name, err)
		}
		var err error
		if r.reg, err = r.inf.AddEventHandler(newRecorder("h")); err != nil {
			t.Fatal(err)
		}
		run(t, r.inf)
		sides = append(sides, r)
	}
	for _, r := range sides {
		waitFor(t, 8*time.Second, r.name+" three failed lists", func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return len(r.errs) >= 3
		})
		lists := r.srv.listTimes()
		if gap := lists[1].Sub(lists[0]); gap < 800*time.Millisecond {
			t.Errorf("%s: second list %v after the first, want at least 800ms", r.name, gap)
		}
		if gap := lists[2].Sub(lists[1]); gap < 1600*time.Millisecond {
			t.Errorf("%s: third list %v after the second, want at least 1.6s", r.name, gap)
		}
		r.mu.Lock()
		for _, err := range r.errs {
			if !apierrors.IsForbidden(err) {
				t.Errorf("%s: watch error handler got %v, want a Forbidden error", r.name, err)
			}
		}
		r.mu.Unlock()
		if r.inf.HasSynced() || r.reg.HasSynced() {
			t.Errorf("%s: synced without a list", r.name)
		}
		errTransform := r.inf.SetTransform(func(o any) (any, error) { return o, nil })
		errHandler := r.inf.SetWatchErrorHandler(func(*toolscache.Reflector, error) {})
		if errTransform == nil || errHandler == nil {
			t.Errorf("%s after start: SetTransform %v, SetWatchErrorHandler %v; want errors", r.name, errTransform, errHandler)
		}
		if _, lean := r.inf.(*Informer); lean && (!errors.Is(errTransform, ErrStarted) || !errors.Is(errHandler, ErrStarted)) {
			t.Errorf("%s after start: SetTransform %v, SetWatchErrorHandler %v; want ErrStarted", r.name, errTransform, errHandler)
		}
	}
}

const transformedAnnotation = "transformed"

// TestTransform checks that the transform is applied to every object
// stored and handed to handlers, whether listed, watched, relisted or
// streamed by watch-list, and never to a tombstone: client-go's informer
// and this one, with and without watch-list, side by side.
func TestTransform(t *testing.T) {
	t.Parallel()
	type side struct {
		name          string
		srv           *fakeServer
		inf           toolscache.SharedIndexInformer
		rec           *recorder
		notConfigMaps atomic.Int32
	}
	sides := make([]*side, 0, 2*len(impls))
	for _, watchList := range []bool{false, true} {
		for _, im := range impls {
			r := &side{name: fmt.Sprintf("%s (watch-list %v)", im.name, watchList), srv: newFakeServer("a", "b", "c")}
			r.srv.watchList = watchList
			r.inf = im.new(r.srv, 0)
			if err := r.inf.SetTransform(func(obj any) (any, error) {
				cm, ok := obj.(*corev1.ConfigMap)
				if !ok {
					r.notConfigMaps.Add(1)
					return obj, nil
				}
				cm = cm.DeepCopy()
				metav1.SetMetaDataAnnotation(&cm.ObjectMeta, transformedAnnotation, "yes")
				return cm, nil
			}); err != nil {
				t.Fatalf("%s: SetTransform before start: %v", r.name, err)
			}
			r.rec = newRecorder(r.name)
			r.rec.annotate = transformedAnnotation
			r.rec.register(t, r.inf, nil)
			runSynced(t, r.inf)
			r.srv.set("d", "1", true)
			r.srv.set("a", "2", true)
			r.srv.remove("b", true)
			sides = append(sides, r)
		}
	}
	for _, r := range sides {
		want := r.srv.snapshot()
		waitFor(t, 5*time.Second, r.name+" handler to get the watched changes", func() bool { return r.rec.matches(want) })
		r.srv.remove("c", false)
		r.srv.set("a", "3", false)
		r.srv.set("e", "1", false)
		r.srv.expireWatches()
	}
	for _, r := range sides {
		want := r.srv.snapshot()
		waitFor(t, 5*time.Second, r.name+" store to match the server", func() bool { return maps.Equal(storeRVs(r.inf), want) })
		waitFor(t, 5*time.Second, r.name+" handler to match the store", func() bool { return r.rec.matches(want) })
		r.rec.noProblems(t)
		for _, obj := range r.inf.GetStore().List() {
			if cm := obj.(*corev1.ConfigMap); cm.Annotations[transformedAnnotation] == "" {
				t.Errorf("%s: stored %s at %s is not transformed", r.name, cm.Name, cm.ResourceVersion)
			}
		}
		if n := r.notConfigMaps.Load(); n != 0 {
			t.Errorf("%s: the transform got %d objects that are not ConfigMaps (tombstones)", r.name, n)
		}
		if s := r.rec.snapshot(); s.tombstones != 1 || s.deletes != 1 {
			t.Errorf("%s: %d tombstones and %d deletes, want 1 and 1", r.name, s.tombstones, s.deletes)
		}
		// Both stream their lists where the server offers it.
		wantLists, wantWatchLists := 0, 2
		if !r.srv.watchList {
			wantLists, wantWatchLists = 2, 0
		}
		if lists, _, watchLists, _ := r.srv.counts(); lists != wantLists || watchLists != wantWatchLists {
			t.Errorf("%s: %d lists and %d watch-lists, want %d and %d", r.name, lists, watchLists, wantLists, wantWatchLists)
		}
	}
}

// TestStoreFollowsBookmarks: a bookmark moves the resource version the
// store has seen, as in client-go's informer.
func TestStoreFollowsBookmarks(t *testing.T) {
	t.Parallel()
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			t.Parallel()
			srv := newFakeServer("a")
			inf := im.new(srv, 0)
			runSynced(t, inf)
			waitFor(t, 5*time.Second, "the watch", func() bool { _, _, _, open := srv.counts(); return open == 1 })
			rv := srv.bookmark()
			waitFor(t, 5*time.Second, "the informer to see the bookmark", func() bool { return inf.LastSyncResourceVersion() == rv })
			waitFor(t, 5*time.Second, "the store to see the bookmark", func() bool { return inf.GetStore().LastStoreSyncResourceVersion() == rv })
		})
	}
}

// TestHandlersCallTheInformer has handlers call the informer from inside
// their callbacks, during the initial list and after: add handlers (one
// of which adds another from its own first callback), remove another
// handler and themselves, and read its state. Nothing may deadlock: every
// wait has a deadline.
func TestHandlersCallTheInformer(t *testing.T) {
	t.Parallel()
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			t.Parallel()
			srv := newFakeServer("a", "b", "c")
			inf := im.new(srv, 0)
			var probes atomic.Int32
			probe := func() {
				_ = inf.LastSyncResourceVersion()
				_ = inf.IsStopped()
				_ = inf.HasSynced()
				_ = inf.GetIndexer().List()
				_, _, _ = inf.GetStore().GetByKey(testNS + "/a")
				probes.Add(1)
			}
			var mu sync.Mutex
			added := map[string]*recorder{}
			addFromCallback := func(r *recorder) {
				r.register(t, inf, nil)
				mu.Lock()
				defer mu.Unlock()
				added[r.name] = r
			}
			get := func(name string) *recorder {
				mu.Lock()
				defer mu.Unlock()
				return added[name]
			}

			victim := newRecorder("victim")
			victim.register(t, inf, nil)
			self := newRecorder("removes itself")
			self.hook = func(r *recorder, n int, _ string) {
				if n == 1 {
					r.unregister(t, inf)
				}
			}
			self.register(t, inf, nil)
			adder := newRecorder("adder")
			adder.hook = func(_ *recorder, n int, event string) {
				probe()
				switch {
				case n == 1: // in the initial list
					child := newRecorder("child")
					child.hook = func(_ *recorder, n int, _ string) {
						probe()
						if n == 1 {
							addFromCallback(newRecorder("grandchild"))
						}
					}
					addFromCallback(child)
				case n == 2:
					victim.unregister(t, inf)
				case strings.HasPrefix(event, "update "): // after the sync
					addFromCallback(newRecorder("child 2"))
					get("child").unregister(t, inf)
				}
			}
			adder.register(t, inf, nil)

			runSynced(t, inf)
			waitFor(t, 5*time.Second, "the adder's handlers", func() bool { return get("child") != nil && get("grandchild") != nil })
			srv.set("a", "2", true)
			waitFor(t, 5*time.Second, "the handler added after the sync", func() bool { return get("child 2") != nil })
			srv.set("d", "1", true)
			want := srv.snapshot()
			for _, r := range []*recorder{adder, get("grandchild"), get("child 2")} {
				waitFor(t, 5*time.Second, r.name+" to match the server", func() bool { return r.matches(want) })
				waitFor(t, 5*time.Second, r.name+" to have synced", r.registration().HasSynced)
			}
			for _, r := range []*recorder{victim, self, adder, get("child"), get("grandchild"), get("child 2")} {
				r.noProblems(t)
			}
			if _, lean := inf.(*Informer); lean {
				// Here a removal takes effect before the handler's next
				// event (client-go's RemoveEventHandler is asynchronous:
				// buffered events may still arrive); a handler removed by
				// another's callback may be in the middle of one.
				if n := self.snapshot().events; n != 1 {
					t.Errorf("the handler that removed itself in its first callback got %d events, want 1", n)
				}
				if s := victim.snapshot(); s.late > 1 {
					t.Errorf("the victim got %d events after its removal, want at most the one under way", s.late)
				}
				if s := get("child").snapshot(); s.late > 1 {
					t.Errorf("the child got %d events after its removal, want at most the one under way", s.late)
				}
			}
			if probes.Load() == 0 {
				t.Error("no callback called the informer")
			}
		})
	}
}

// TestLifecycle runs an informer to its end: a second Run returns at once,
// the informer adds at most two goroutines (the one that runs it and its
// pump, shared but alone here), cancelling the context ends Run and
// stops it for good, and nothing is left running.
func TestLifecycle(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	srv := newFakeServer("a", "b")
	clk := clocktesting.NewFakeClock(time.Now())
	inf := newInformer(srv, &corev1.ConfigMap{}, time.Minute, nil, clk)
	rec := newRecorder("h")
	rec.register(t, inf, nil)
	if inf.IsStopped() || inf.HasSynced() || inf.LastSyncResourceVersion() != "" {
		t.Fatal("stopped, synced or with a resource version before Run")
	}

	before := goruntime.NumGoroutine()
	stop := run(t, inf)
	waitFor(t, 5*time.Second, "sync", inf.HasSynced)
	waitFor(t, 5*time.Second, "the watch", func() bool { _, _, _, open := srv.counts(); return open == 1 })
	waitFor(t, 5*time.Second, "the resync timer", clk.HasWaiters)
	waitFor(t, 5*time.Second, "the handler to sync", rec.registration().HasSynced)
	waitFor(t, 5*time.Second, "the handler's delivery to end", inf.idle)
	// The one that runs it, its pump and the one that waits for the next
	// event of the fake server's watch.
	waitFor(t, 5*time.Second, "the delivery goroutine to exit", func() bool { return goruntime.NumGoroutine()-before <= 3 })
	if n := goruntime.NumGoroutine() - before; n > 3 {
		t.Errorf("a running informer added %d goroutines, want at most 3", n)
	} else {
		t.Logf("a running informer added %d goroutines", n)
	}

	second := make(chan struct{})
	go func() {
		defer close(second)
		inf.Run(t.Context().Done())
	}()
	waitFor(t, 5*time.Second, "a second Run to return", closed(second))
	if lists, watches, _, open := srv.counts(); lists != 1 || watches != 1 || open != 1 {
		t.Errorf("%d lists, %d watches, %d open; want one of each", lists, watches, open)
	}
	if inf.IsStopped() {
		t.Error("stopped by a second Run")
	}

	stop()
	if !inf.IsStopped() {
		t.Error("not stopped after Run returned")
	}
	if _, err := inf.AddEventHandler(newRecorder("too late")); !errors.Is(err, ErrStopped) {
		t.Errorf("AddEventHandler after stop: %v, want ErrStopped", err)
	}
	if err := inf.AddIndexers(toolscache.Indexers{"x": toolscache.MetaNamespaceIndexFunc}); !errors.Is(err, ErrStopped) {
		t.Errorf("AddIndexers after stop: %v, want ErrStopped", err)
	}
	inf.Run(make(chan struct{})) // returns at once: an informer runs once
	if lists, _, _, open := srv.counts(); lists != 1 || open != 0 {
		t.Errorf("after stop: %d lists, %d open watches; want 1 and 0", lists, open)
	}
	rec.noProblems(t)
	leakcheck.VerifyNone(t, ignore)
}

// TestStopBeforeSync: an informer stopped before its first list succeeds
// never syncs, nor do its handlers (one added before the start, one
// after), and leaves nothing running.
func TestStopBeforeSync(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	srv := newFakeServer("a")
	srv.setListErr(apierrors.NewServiceUnavailable("not yet"))
	inf := New(srv, &corev1.ConfigMap{}, 0, nil)
	var errs atomic.Int32
	if err := inf.SetWatchErrorHandler(func(*toolscache.Reflector, error) { errs.Add(1) }); err != nil {
		t.Fatal(err)
	}
	reg, err := inf.AddEventHandler(newRecorder("h"))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, inf)
	waitFor(t, 5*time.Second, "a failed list", func() bool { return errs.Load() > 0 })
	joined, err := inf.AddEventHandler(newRecorder("added after the start"))
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if inf.HasSynced() || reg.HasSynced() || joined.HasSynced() || toolscache.IsDone(inf.HasSyncedChecker()) {
		t.Error("synced without a list")
	}
	if !inf.IsStopped() {
		t.Error("not stopped")
	}
	leakcheck.VerifyNone(t, ignore)
}

// TestClientGoGoroutines logs, for comparison, how many goroutines
// client-go's informer adds with one handler over the same watcher.
func TestClientGoGoroutines(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	srv := newFakeServer("a", "b")
	inf := toolscache.NewSharedIndexInformer(srv, &corev1.ConfigMap{}, time.Minute, nil)
	if _, err := inf.AddEventHandler(newRecorder("h")); err != nil {
		t.Fatal(err)
	}
	before := goruntime.NumGoroutine()
	stop := run(t, inf)
	waitFor(t, 5*time.Second, "sync", inf.HasSynced)
	waitFor(t, 5*time.Second, "the watch", func() bool { _, _, _, open := srv.counts(); return open == 1 })
	t.Logf("client-go's running informer with one handler added %d goroutines", goruntime.NumGoroutine()-before)
	stop()
	leakcheck.VerifyNone(t, ignore)
}

// TestRealAPIServer runs client-go's informer and this one over the
// ConfigMaps of one namespace of a real API server, with client-go's
// ListWatch (watch-list where the server offers it), and checks that a
// handler added before the start and one added after the sync end with
// what the server holds, through creates, updates and deletes.
func TestRealAPIServer(t *testing.T) {
	t.Parallel()
	f, err := test.Start(test.Options{}, "informer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Error(err)
		}
	})
	cs, err := kubernetes.NewForConfig(f.Cluster("informer").Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const ns = "informer"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cms := cs.CoreV1().ConfigMaps(ns)
	create := func(name string) {
		t.Helper()
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": "0"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	update := func(name string) {
		t.Helper()
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["v"] += "1"
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	remove := func(name string) {
		t.Helper()
		if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"a", "b", "c"} {
		create(name)
	}
	initial, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}

	infs := map[string]toolscache.SharedIndexInformer{}
	recs := make([]*recorder, 0, 2*len(impls))
	for _, im := range impls {
		lw := toolscache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "configmaps", ns, fields.Everything())
		inf := im.new(lw, 0)
		early := newRecorder(im.name + " early")
		early.register(t, inf, nil)
		runSynced(t, inf)
		late := newRecorder(im.name + " late")
		late.register(t, inf, nil)
		infs[im.name] = inf
		recs = append(recs, early, late)
	}
	create("d")
	create("e")
	update("a")
	update("d")
	remove("b")
	remove("e")
	update("a")

	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, cm := range list.Items {
		want[ns+"/"+cm.Name] = cm.ResourceVersion
	}
	for name, inf := range infs {
		waitFor(t, 10*time.Second, name+" store to match the server", func() bool { return maps.Equal(storeRVs(inf), want) })
	}
	for _, r := range recs {
		waitFor(t, 10*time.Second, r.name+" to match the server", func() bool { return r.matches(want) })
		waitFor(t, 5*time.Second, r.name+" to have synced", r.registration().HasSynced)
		r.noProblems(t)
		if s := r.snapshot(); s.initial != len(initial.Items) {
			t.Errorf("%s: %d adds in the initial list, want %d", r.name, s.initial, len(initial.Items))
		}
	}
}
