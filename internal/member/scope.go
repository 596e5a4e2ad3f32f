package member

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/syncinformer"
)

// A member's scope (BuildOptions.Scope): the part of its cluster it
// watches, when its source says the cluster's credentials are good for
// some namespaces only (Argo CD's "namespaces" and "clusterResources").
//
// Its cache lists and watches namespaced kinds in those namespaces only
// (controller-runtime's namespace-restricted cache: one list and watch per
// namespace), within the namespaces the user's own cache options ask for.
// Without cluster resources, a cluster-scoped kind is not watched at all:
// a controller's source asking for it waits, the way a source waits for a
// kind the cluster does not serve (latekind.go), so that the member syncs
// and its other controllers run; the kind is listed by UnservedKinds with
// the reason, and logged once. Reads and GetInformer calls without a
// waiter fail at once with ErrOutOfScope, as do reads in a namespace
// outside the scope; an index on such a kind is never used, and adding
// one does nothing.

// ErrOutOfScope is wrapped by the errors of reads (and informers) a member
// does not serve because its scope leaves them out: a cluster-scoped kind
// without cluster resources, an object in a namespace outside the scope,
// or cache options that watch no namespace inside it.
var ErrOutOfScope = errors.New("outside the member cluster's scope")

// UnservedKind is a kind that the member's controllers ask for (or
// anyone, through GetInformer) and that the member does not serve, and
// why.
type UnservedKind struct {
	// Kind is the kind as schema.GroupVersionKind prints it
	// ("rbac.authorization.k8s.io/v1, Kind=ClusterRole"), or, for a kind
	// only a reflector has named, its Go type ("*v1.Secret").
	Kind string
	// Reason says why: outside the member's scope (naming the scope and
	// its source), or forbidden to the member's identity.
	Reason string
}

// unservedKinds is what UnservedKinds reports: the cluster-scoped kinds
// refused for the member's scope, and the kinds its identity may not list
// or watch (the forbidden set, which follows RBAC as it changes). Its lock
// is a leaf.
type unservedKinds struct {
	forbidden *syncinformer.Kinds
	scope     config.Scope
	source    string
	log       logr.Logger
	// hook is told when the report changes (set by Build, before use;
	// forbidden tells it of its own changes).
	hook *kindsHook

	mu sync.Mutex
	// outside are the kinds refused for the scope. A member runs one scope
	// for its whole life, so a kind refused once stays refused.
	outside map[string]struct{}
	// elsewhere are the kinds another cache serves (the host's) that the
	// member's controllers watch, by the description their forbidden set
	// keys them with (see watchElsewhere).
	elsewhere map[string]elsewhereKind
	// names maps a reflector's description of a typed kind ("*v1.Secret")
	// to its group, version and kind, as learned from GetInformer.
	names map[string]string
}

func newUnservedKinds(forbidden *syncinformer.Kinds, scope config.Scope, source string, log logr.Logger) *unservedKinds {
	return &unservedKinds{
		forbidden: forbidden, scope: scope, source: source, log: log,
		outside: map[string]struct{}{}, names: map[string]string{},
	}
}

// describeScope is the scope and where it came from, for messages.
func (u *unservedKinds) describeScope() string {
	if u.source == "" {
		return u.scope.String()
	}
	return u.scope.String() + ", from " + u.source
}

// refuse records that kind, cluster-scoped, was asked for outside the
// scope, logging it the first time, and returns the error to answer with.
func (u *unservedKinds) refuse(kind string) error {
	u.mu.Lock()
	_, seen := u.outside[kind]
	u.outside[kind] = struct{}{}
	u.mu.Unlock()
	if !seen {
		u.hook.changed()
		u.log.Info("kind is cluster-scoped and outside the cluster's scope: not watched; its controller waits while the others run",
			"kind", kind, "scope", u.scope.String(), "source", u.source)
	}
	return fmt.Errorf("%s is cluster-scoped: %w (%s)", kind, ErrOutOfScope, u.describeScope())
}

// name remembers that a reflector describes kind gvk as desc.
func (u *unservedKinds) name(desc, gvk string) {
	if desc == gvk {
		return
	}
	u.mu.Lock()
	_, known := u.names[desc]
	if !known {
		u.names[desc] = gvk
	}
	u.mu.Unlock()
	// A forbidden kind is reported by the name learned here.
	if !known && u.forbidden.Has(desc) {
		u.hook.changed()
	}
}

// elsewhereKind is a kind another cache serves, as the member reports it
// while forbidden (another cache's set of kinds its identity may not
// list) has it.
type elsewhereKind struct {
	forbidden    *syncinformer.Kinds
	kind, reason string
}

// watchElsewhere makes the report show kind, with reason, while
// forbidden has desc, until ctx ends.
func (u *unservedKinds) watchElsewhere(ctx context.Context, forbidden *syncinformer.Kinds, desc, kind, reason string) {
	if u == nil || forbidden == nil {
		return
	}
	u.mu.Lock()
	if _, ok := u.elsewhere[desc]; ok {
		u.mu.Unlock()
		return
	}
	if u.elsewhere == nil {
		u.elsewhere = map[string]elsewhereKind{}
	}
	u.elsewhere[desc] = elsewhereKind{forbidden: forbidden, kind: kind, reason: reason}
	u.mu.Unlock()
	stop := forbidden.Notify(u.hook.changed)
	context.AfterFunc(ctx, stop)
	if forbidden.Has(desc) {
		u.hook.changed()
	}
}

// list returns the report, sorted by kind; nil when empty.
func (u *unservedKinds) list() []UnservedKind {
	if u == nil {
		return nil
	}
	forbidden := u.forbidden.List()
	u.mu.Lock()
	out := make([]UnservedKind, 0, len(u.outside)+len(forbidden))
	outsideReason := "cluster-scoped, and outside the cluster's scope (" + u.describeScope() + ")"
	for kind := range u.outside {
		out = append(out, UnservedKind{Kind: kind, Reason: outsideReason})
	}
	forbiddenReason := "the cluster's identity may not list or watch it"
	if !u.scope.Whole() {
		forbiddenReason += " in the cluster's scope (" + u.describeScope() + ")"
	}
	for _, desc := range forbidden {
		kind := desc
		if gvk, ok := u.names[desc]; ok {
			kind = gvk
		}
		if _, refused := u.outside[kind]; !refused {
			out = append(out, UnservedKind{Kind: kind, Reason: forbiddenReason})
		}
	}
	elsewhere := make(map[string]elsewhereKind, len(u.elsewhere))
	maps.Copy(elsewhere, u.elsewhere)
	u.mu.Unlock()
	// Asked with u.mu released: it is a leaf.
	for desc, e := range elsewhere {
		if e.forbidden.Has(desc) {
			out = append(out, UnservedKind{Kind: e.kind, Reason: e.reason})
		}
	}
	if len(out) == 0 {
		return nil
	}
	slices.SortFunc(out, func(a, b UnservedKind) int { return strings.Compare(a.Kind, b.Kind) })
	return out
}

// UnservedKinds returns, sorted by kind, the kinds the member does not
// serve: cluster-scoped kinds outside its scope (BuildOptions.Scope) that
// a controller (or anyone, through GetInformer) asked for, and kinds its
// identity may not list or watch (until the rule is granted). Its other
// controllers run. It takes only leaf locks: callers may hold theirs.
func (m *Manager) UnservedKinds() []UnservedKind { return m.unserved.list() }

// scopedNewCache returns a NewCacheFunc around next (cache.New when nil)
// whose caches keep to u's scope (see the top of this file); with the
// whole cluster as scope, they only learn the names of the kinds asked
// for, for the report. lifetime ends the waits of refused sources.
func scopedNewCache(lifetime context.Context, next cache.NewCacheFunc, u *unservedKinds) cache.NewCacheFunc {
	if next == nil {
		next = cache.New
	}
	return func(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
		if !u.scope.Whole() {
			var err error
			if opts, err = narrowCacheOptions(opts, u.scope, u.describeScope()); err != nil {
				return nil, err
			}
		}
		c, err := next(cfg, opts)
		if err != nil {
			return nil, err
		}
		scheme := opts.Scheme
		if scheme == nil {
			scheme = clientgoscheme.Scheme // cache.New's default too
		}
		sc := &scopeCache{Cache: c, lifetime: lifetime, report: u, scheme: scheme, mapper: opts.Mapper}
		if u.scope.Whole() {
			return sc, nil
		}
		sc.namespaces = make(map[string]bool, len(u.scope.Namespaces))
		for _, ns := range u.scope.Namespaces {
			sc.namespaces[ns] = true
		}
		return &scopedReads{sc}, nil
	}
}

// narrowCacheOptions restricts the namespaces of opts to the scope's: the
// default namespaces, and those of every ByObject entry that names its
// own. A map that names none means every namespace, so the scope's; a map
// that names some keeps those in the scope, and gives the others of the
// scope the settings of its AllNamespaces entry, if it has one. Nothing
// left is an error wrapping ErrOutOfScope. The caller's maps are not
// changed: every member shares them.
func narrowCacheOptions(opts cache.Options, scope config.Scope, described string) (cache.Options, error) {
	def := namespacesWithin(opts.DefaultNamespaces, scope)
	if len(def) == 0 {
		return opts, fmt.Errorf("the cache options' DefaultNamespaces (%s) are all %w (%s)", listNamespaces(opts.DefaultNamespaces), ErrOutOfScope, described)
	}
	opts.DefaultNamespaces = def
	if len(opts.ByObject) == 0 {
		return opts, nil
	}
	by := make(map[client.Object]cache.ByObject, len(opts.ByObject))
	for obj, b := range opts.ByObject {
		// nil: the defaults (narrowed above), or a cluster-scoped kind.
		if b.Namespaces != nil {
			ns := namespacesWithin(b.Namespaces, scope)
			if len(ns) == 0 {
				return opts, fmt.Errorf("the cache options' ByObject namespaces of %T (%s) are all %w (%s)", obj, listNamespaces(b.Namespaces), ErrOutOfScope, described)
			}
			b.Namespaces = ns
		}
		by[obj] = b
	}
	opts.ByObject = by
	return opts, nil
}

// namespacesWithin is the part of m (namespace settings of cache.Options)
// within scope; see narrowCacheOptions.
func namespacesWithin(m map[string]cache.Config, scope config.Scope) map[string]cache.Config {
	out := make(map[string]cache.Config, len(scope.Namespaces))
	all, hasAll := m[cache.AllNamespaces]
	for _, ns := range scope.Namespaces {
		switch cfg, ok := m[ns]; {
		case ok:
			out[ns] = cfg
		case len(m) == 0:
			out[ns] = cache.Config{}
		case hasAll:
			out[ns] = all
		}
	}
	return out
}

// listNamespaces names the namespaces of m for a message, ten at most.
func listNamespaces(m map[string]cache.Config) string {
	names := slices.Sorted(maps.Keys(m))
	for i, ns := range names {
		if ns == cache.AllNamespaces {
			names[i] = "all"
		}
	}
	if len(names) > 10 {
		return strings.Join(names[:10], ", ") + fmt.Sprintf(" and %d more", len(names)-10)
	}
	return strings.Join(names, ", ")
}

// scopeCache keeps informers to the member's scope (see the top of this
// file); it sits under syncNotifyingCache, which waits for kinds the
// cluster does not serve before asking it.
type scopeCache struct {
	cache.Cache
	lifetime context.Context
	report   *unservedKinds
	scheme   *runtime.Scheme
	mapper   meta.RESTMapper
	// namespaces are the scope's; nil for the whole cluster.
	namespaces map[string]bool
	// scopes caches, by Go type for typed kinds and by group, version and
	// kind for the others, whether a kind is namespaced.
	scopes sync.Map
}

// kindInfo is what scopeCache knows of a kind.
type kindInfo struct {
	gvk        schema.GroupVersionKind
	namespaced bool
}

// dynamicTypes stand for every kind: their kind is in the object, not in
// the Go type.
var dynamicTypes = []reflect.Type{
	reflect.TypeFor[*unstructured.Unstructured](),
	reflect.TypeFor[*unstructured.UnstructuredList](),
	reflect.TypeFor[*metav1.PartialObjectMetadata](),
	reflect.TypeFor[*metav1.PartialObjectMetadataList](),
}

var errNoRESTMapper = errors.New("no REST mapper")

// kindOf returns the kind of obj (an object or a list) and whether it is
// namespaced, as the REST mapper says; an error (a kind the cluster does
// not serve, say) leaves the decision to the cache underneath.
func (c *scopeCache) kindOf(obj runtime.Object) (kindInfo, error) {
	t := reflect.TypeOf(obj)
	dynamic := slices.Contains(dynamicTypes, t)
	if !dynamic {
		if v, ok := c.scopes.Load(t); ok {
			return v.(kindInfo), nil
		}
	}
	gvk, err := apiutil.GVKForObject(obj, c.scheme)
	if err != nil {
		return kindInfo{}, err
	}
	if meta.IsListType(obj) {
		gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	}
	info, err := c.kindOfGVK(gvk)
	if err == nil && !dynamic {
		c.scopes.Store(t, info)
	}
	return info, err
}

// knownKind is kindOf for callers that leave a kind the mapper cannot
// tell (one the cluster does not serve, say) to the cache underneath,
// which says what is wrong with it.
func (c *scopeCache) knownKind(obj runtime.Object) (kindInfo, bool) {
	info, err := c.kindOf(obj)
	return info, err == nil
}

func (c *scopeCache) kindOfGVK(gvk schema.GroupVersionKind) (kindInfo, error) {
	if v, ok := c.scopes.Load(gvk); ok {
		return v.(kindInfo), nil
	}
	if c.mapper == nil {
		return kindInfo{}, errNoRESTMapper
	}
	namespaced, err := apiutil.IsGVKNamespaced(gvk, c.mapper)
	if err != nil {
		return kindInfo{}, err
	}
	info := kindInfo{gvk: gvk, namespaced: namespaced}
	c.scopes.Store(gvk, info)
	return info, nil
}

// refused reports whether a kind is outside the scope: cluster-scoped, in
// a scope of some namespaces without cluster resources.
func (c *scopeCache) refused(info kindInfo) bool {
	return c.namespaces != nil && !info.namespaced && !c.report.scope.ClusterResources
}

// refuse answers a GetInformer for a kind outside the scope. A controller's
// source (a waiter in ctx) waits until the member stops, counted as
// waiting so that the member syncs without it; anyone else gets the error
// at once.
func (c *scopeCache) refuse(ctx context.Context, gvk schema.GroupVersionKind) error {
	err := c.report.refuse(gvk.String())
	w := waiterFrom(ctx)
	if w == nil {
		return err
	}
	w.add(1)
	defer w.add(-1)
	select {
	case <-ctx.Done():
	case <-c.lifetime.Done():
	}
	return err
}

// GetInformer refuses a kind outside the scope (see refuse) and otherwise
// asks the cache underneath, learning on the way how reflectors name the
// kind.
func (c *scopeCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	if info, known := c.knownKind(obj); known {
		if c.refused(info) {
			return nil, c.refuse(ctx, info.gvk)
		}
		if _, ok := obj.(*metav1.PartialObjectMetadata); !ok {
			c.report.name(syncinformer.KindOf(obj), info.gvk.String())
		}
	}
	return c.Cache.GetInformer(ctx, obj, opts...)
}

// GetInformerForKind is GetInformer by kind.
func (c *scopeCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	if info, err := c.kindOfGVK(gvk); err == nil && c.refused(info) {
		return nil, c.refuse(ctx, gvk)
	}
	return c.Cache.GetInformerForKind(ctx, gvk, opts...)
}

// IndexField adds nothing for a kind outside the scope: it is never read.
func (c *scopeCache) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	if info, known := c.knownKind(obj); known && c.refused(info) {
		c.report.log.V(1).Info("index on a kind outside the cluster's scope not added: the kind is not read", "kind", info.gvk.String(), "field", field)
		return nil
	}
	return c.Cache.IndexField(ctx, obj, field, extract)
}

// scopedReads is a scopeCache of some namespaces: reads outside them fail
// with ErrOutOfScope rather than start an informer the scope leaves out
// (a cluster-scoped kind) or meet controller-runtime's "unknown namespace"
// error (a namespace outside the scope).
type scopedReads struct{ *scopeCache }

func (c *scopedReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := c.outside(obj, key.Namespace); err != nil {
		return err
	}
	return c.Cache.Get(ctx, key, obj, opts...)
}

func (c *scopedReads) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := c.outsideList(list, opts); err != nil {
		return err
	}
	return c.Cache.List(ctx, list, opts...)
}

// outsideList is outside for a List with opts.
func (c *scopedReads) outsideList(list client.ObjectList, opts []client.ListOption) error {
	var lo client.ListOptions
	lo.ApplyOptions(opts)
	return c.outside(list, lo.Namespace)
}

// outside returns the error for a read of obj's kind in namespace ns ("":
// every namespace, or a cluster-scoped kind) that the scope leaves out;
// nil for a read the scope allows, or of a kind it cannot tell.
func (c *scopedReads) outside(obj runtime.Object, ns string) error {
	info, known := c.knownKind(obj)
	switch {
	case !known:
		return nil
	case c.refused(info):
		return fmt.Errorf("%s is cluster-scoped: %w (%s)", info.gvk, ErrOutOfScope, c.report.describeScope())
	case info.namespaced && ns != "" && !c.namespaces[ns]:
		return fmt.Errorf("%s in namespace %s: %w (%s)", info.gvk.Kind, config.QuoteName(ns), ErrOutOfScope, c.report.describeScope())
	}
	return nil
}
