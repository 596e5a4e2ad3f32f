package fakeapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/watch"
)

// object is what the server stores: a typed core/v1 object.
type object interface {
	runtime.Object
	metav1.Object
}

// kind is a resource the server serves.
type kind struct {
	resource, kind string
	namespaced     bool
	new            func() object
}

func (k *kind) gvk() schema.GroupVersionKind { return corev1.SchemeGroupVersion.WithKind(k.kind) }
func (k *kind) gr() schema.GroupResource     { return corev1.Resource(k.resource) }

var kinds = []*kind{
	{"configmaps", "ConfigMap", true, func() object { return &corev1.ConfigMap{} }},
	{"secrets", "Secret", true, func() object { return &corev1.Secret{} }},
	{"namespaces", "Namespace", false, func() object { return &corev1.Namespace{} }},
}

func kindFor(resource string) *kind {
	for _, k := range kinds {
		if k.resource == resource {
			return k
		}
	}
	return nil
}

func kindOf(obj runtime.Object) *kind {
	for _, k := range kinds {
		if reflect.TypeOf(obj) == reflect.TypeOf(k.new()) {
			return k
		}
	}
	return nil
}

// entry is a stored object, encoded once in JSON and once in protobuf
// for all the clients that read it. A write stores a new entry and never
// changes an old one, so readers may use entries after unlocking.
type entry struct {
	obj object
	raw []byte // JSON, which patches apply to
	pb  []byte // protobuf, with its envelope
}

// in is the entry encoded in f.
func (e entry) in(f format) []byte {
	if f == formatProtobuf {
		return e.pb
	}
	return e.raw
}

// event is a change as watchers see it.
type event struct {
	kind *kind
	rv   uint64
	obj  object
	// frames are the event as a watch in each format carries it, shared
	// by all watchers.
	frames [2][]byte
}

// store holds the objects, the recent events and the open watches. One
// mutex orders every write, so resourceVersions grow by one per write
// across all resources, like etcd's revision, and a watch that takes its
// starting point under the same lock misses nothing.
type store struct {
	mu        sync.Mutex
	rv        uint64
	objects   map[*kind]map[string]entry // by namespace/name
	history   int
	log       []event // the last history to 2*history events
	compacted uint64  // the newest resourceVersion gone from log
	watchers  map[*watcher]struct{}
}

func (st *store) init() {
	st.objects = map[*kind]map[string]entry{}
	for _, k := range kinds {
		st.objects[k] = map[string]entry{}
	}
	st.watchers = map[*watcher]struct{}{}
}

func key(ns, name string) string { return ns + "/" + name }

func (st *store) get(k *kind, ns, name string) (entry, bool) {
	e, ok := st.objects[k][key(ns, name)]
	return e, ok
}

// commit makes obj, which the caller hands over, the new state of its key,
// or removes the key for Deleted, and tells the watchers. It returns the
// entry of obj, stored or not. st.mu is held.
func (st *store) commit(k *kind, typ watch.EventType, obj object) entry {
	st.rv++
	obj.SetResourceVersion(strconv.FormatUint(st.rv, 10))
	obj.GetObjectKind().SetGroupVersionKind(k.gvk())
	e := entry{obj: obj, raw: mustJSON(obj), pb: mustProtobuf(obj)}
	if typ == watch.Deleted {
		delete(st.objects[k], key(obj.GetNamespace(), obj.GetName()))
	} else {
		st.objects[k][key(obj.GetNamespace(), obj.GetName())] = e
	}
	ev := event{kind: k, rv: st.rv, obj: obj}
	for _, f := range []format{formatJSON, formatProtobuf} {
		ev.frames[f] = f.frame(typ, e.in(f))
	}
	st.log = append(st.log, ev)
	if len(st.log) > 2*st.history {
		drop := len(st.log) - st.history
		st.compacted = st.log[drop-1].rv
		st.log = slices.Clone(st.log[drop:])
	}
	for w := range st.watchers {
		if w.kind == k && w.filter.match(obj) {
			w.push(ev.frames[w.format])
		}
	}
	return e
}

// create stores a new object. st.mu is held.
func (st *store) create(k *kind, obj object) (entry, error) {
	if _, ok := st.get(k, obj.GetNamespace(), obj.GetName()); ok {
		return entry{}, apierrors.NewAlreadyExists(k.gr(), obj.GetName())
	}
	if obj.GetUID() == "" {
		obj.SetUID(uuid.NewUUID())
	}
	obj.SetCreationTimestamp(metav1.Now())
	normalize(obj)
	return st.commit(k, watch.Added, obj), nil
}

// replace stores obj in place of cur if obj has cur's resourceVersion or
// none. A write that changes nothing is no write, as on a real server: no
// new resourceVersion and no event, or controllers that write what they
// read would wake themselves forever. st.mu is held.
func (st *store) replace(k *kind, cur entry, obj object) (entry, error) {
	if rv := obj.GetResourceVersion(); rv != "" && rv != cur.obj.GetResourceVersion() {
		return entry{}, apierrors.NewConflict(k.gr(), obj.GetName(), errors.New(
			"the object has been modified; please apply your changes to the latest version and try again"))
	}
	obj.SetUID(cur.obj.GetUID())
	obj.SetCreationTimestamp(cur.obj.GetCreationTimestamp())
	obj.SetResourceVersion(cur.obj.GetResourceVersion())
	obj.GetObjectKind().SetGroupVersionKind(k.gvk())
	normalize(obj)
	if string(mustJSON(obj)) == string(cur.raw) {
		return cur, nil
	}
	return st.commit(k, watch.Modified, obj), nil
}

// remove deletes cur. Deleting a Namespace deletes what is in it at once,
// where a real cluster's namespace controller does it soon after. st.mu is
// held.
func (st *store) remove(k *kind, cur entry) {
	st.commit(k, watch.Deleted, cur.obj.DeepCopyObject().(object))
	if k.namespaced {
		return
	}
	for _, nk := range kinds {
		for _, e := range st.objects[nk] {
			if nk.namespaced && e.obj.GetNamespace() == cur.obj.GetName() {
				st.commit(nk, watch.Deleted, e.obj.DeepCopyObject().(object))
			}
		}
	}
}

// selected returns the entries f matches, in key order.
func (st *store) selected(k *kind, f filter) []entry {
	var keys []string
	for key, e := range st.objects[k] {
		if f.match(e.obj) {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	out := make([]entry, len(keys))
	for i, key := range keys {
		out[i] = st.objects[k][key]
	}
	return out
}

// normalize does to each write what the real server's strategies for these
// kinds do.
func normalize(obj object) {
	switch o := obj.(type) {
	case *corev1.Secret:
		for k, v := range o.StringData {
			if o.Data == nil {
				o.Data = map[string][]byte{}
			}
			o.Data[k] = []byte(v)
		}
		o.StringData = nil
		if o.Type == "" {
			o.Type = corev1.SecretTypeOpaque
		}
	case *corev1.Namespace:
		if o.Status.Phase == "" {
			o.Status.Phase = corev1.NamespaceActive
		}
		if o.Labels == nil {
			o.Labels = map[string]string{}
		}
		o.Labels[corev1.LabelMetadataName] = o.Name
	}
}

// Seed stores objs (*corev1.ConfigMap, *corev1.Secret, *corev1.Namespace)
// as if created, or updated if they exist, through the API, so watchers
// see them. Namespaced objects without a namespace go to "default". Other
// types are a bug in the test: Seed panics.
func (s *Server) Seed(objs ...runtime.Object) {
	for _, o := range objs {
		k := kindOf(o)
		if k == nil {
			panic(fmt.Sprintf("fakeapi: cannot seed a %T", o))
		}
		obj := o.DeepCopyObject().(object)
		if !k.namespaced {
			obj.SetNamespace("")
		} else if obj.GetNamespace() == "" {
			obj.SetNamespace(metav1.NamespaceDefault)
		}
		obj.SetResourceVersion("")
		s.mu.Lock()
		if cur, ok := s.get(k, obj.GetNamespace(), obj.GetName()); ok {
			_, _ = s.replace(k, cur, obj)
		} else {
			_, _ = s.create(k, obj)
		}
		s.mu.Unlock()
	}
}

// filter selects objects for list, watch and deletecollection.
type filter struct {
	namespace string
	labels    labels.Selector
	fields    fields.Selector
}

func parseFilter(ns string, q url.Values) (filter, error) {
	f := filter{namespace: ns, labels: labels.Everything(), fields: fields.Everything()}
	var err error
	if f.labels, err = labels.Parse(q.Get("labelSelector")); err != nil {
		return f, badRequest("invalid labelSelector: %v", err)
	}
	if f.fields, err = fields.ParseSelector(q.Get("fieldSelector")); err != nil {
		return f, badRequest("invalid fieldSelector: %v", err)
	}
	for _, r := range f.fields.Requirements() {
		if r.Field != "metadata.name" && r.Field != "metadata.namespace" {
			return f, badRequest("field label not supported: %s", r.Field)
		}
	}
	return f, nil
}

func (f filter) match(o metav1.Object) bool {
	return (f.namespace == "" || o.GetNamespace() == f.namespace) &&
		f.labels.Matches(labels.Set(o.GetLabels())) &&
		f.fields.Matches(fields.Set{"metadata.name": o.GetName(), "metadata.namespace": o.GetNamespace()})
}

// watcher is an open watch. Its queue has no bound, so that a write never
// waits for a slow client and no event is dropped; tests do not run long
// enough for that to matter.
type watcher struct {
	kind   *kind
	filter filter
	format format
	mu     sync.Mutex
	queue  [][]byte
	wake   chan struct{} // capacity 1: "the queue is not empty"
}

func (w *watcher) push(frame []byte) {
	w.mu.Lock()
	w.queue = append(w.queue, frame)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watcher) take() [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queue
	w.queue = nil
	return q
}

// subscribe registers a watch of the k objects f selects from
// resourceVersion rv on, whose frames are in fm. Its queue starts with
// what the client has not seen: the current objects (for rv "" or "0", or
// initial, which ends them with the bookmark watch-list clients wait for),
// or the events after rv. From before the kept events, it returns the 410
// frame a compacted server sends, and no watcher.
func (st *store) subscribe(k *kind, f filter, rv string, initial bool, fm format) (*watcher, []byte, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	w := &watcher{kind: k, filter: f, format: fm, wake: make(chan struct{}, 1)}
	if rv == "" || rv == "0" || initial {
		for _, e := range st.selected(k, f) {
			w.queue = append(w.queue, fm.frame(watch.Added, e.in(fm)))
		}
		if initial {
			bm := k.new()
			bm.GetObjectKind().SetGroupVersionKind(k.gvk())
			bm.SetResourceVersion(strconv.FormatUint(st.rv, 10))
			bm.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
			w.queue = append(w.queue, fm.frame(watch.Bookmark, fm.encode(bm)))
		}
	} else {
		from, err := strconv.ParseUint(rv, 10, 64)
		if err != nil {
			return nil, nil, badRequest("invalid resourceVersion %q", rv)
		}
		if from < st.compacted {
			gone := apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, st.compacted+1))
			return nil, fm.frame(watch.Error, fm.encode(apiStatus(gone))), nil
		}
		for _, ev := range st.log {
			if ev.rv > from && ev.kind == k && f.match(ev.obj) {
				w.queue = append(w.queue, ev.frames[fm])
			}
		}
	}
	st.watchers[w] = struct{}{}
	return w, nil, nil
}

func (st *store) unsubscribe(w *watcher) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.watchers, w)
}

// jsonFrame is a JSON watch's frame for an event of typ about the object
// in JSON: the metav1.WatchEvent on a line.
func jsonFrame(typ watch.EventType, raw []byte) []byte {
	return append(mustJSON(metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: raw}}), '\n')
}

// mustJSON encodes the API types the server builds, which cannot fail.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("fakeapi: encoding %T: %v", v, err))
	}
	return b
}
