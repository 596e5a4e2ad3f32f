package leanmapper

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

const (
	// negativeTTL is how long an answer that something is not served
	// stands: a 404 for a group-version, a kind or resource missing from
	// a fetched group-version, a group missing from the group list.
	negativeTTL = time.Second
	// groupsTTL is how long the group list stands for groups it lists.
	groupsTTL = 10 * time.Second
)

// resource is what a Mapper keeps of a discovered resource.
type resource struct {
	plural, singular, kind string
	namespaced             bool
}

// gvState is a group-version's discovery as fetched at a time: its
// resources, or nil when the server did not serve it. The list is shared
// with every Mapper that read the same document: read only.
type gvState struct {
	list    *resourceList
	fetched time.Time
}

// call is one in-flight request, shared by whoever asks meanwhile.
type call struct {
	done chan struct{}
	err  error
}

// discoverer is what a Mapper asks (httpDiscoverer).
type discoverer interface {
	// GroupVersion returns the JSON resource list of groupVersion; a
	// group-version not served is an error apierrors.IsNotFound knows.
	GroupVersion(groupVersion string) ([]byte, error)
	ServerGroups() (*metav1.APIGroupList, error)
}

// httpDiscoverer asks the API server through a discovery client.
type httpDiscoverer struct{ *discovery.DiscoveryClient }

// GroupVersion asks with no context of its own, as client-go's discovery
// does: meta.RESTMapper carries none. The HTTP client's timeout bounds it.
func (d httpDiscoverer) GroupVersion(gv string) ([]byte, error) {
	return d.RESTClient().Get().AbsPath(GroupVersionPath(gv)).
		SetHeader("Accept", "application/json").Do(context.Background()).Raw()
}

// GroupVersionPath is where the API server serves groupVersion's
// resource list: /api/v1 for the core group, /apis/<group>/<version> else.
func GroupVersionPath(groupVersion string) string {
	if groupVersion == "v1" {
		return "/api/v1"
	}
	return "/apis/" + groupVersion
}

// Mapper is a meta.RESTMapper that discovers group-versions one at a
// time, as they are asked about. It is safe for concurrent use.
type Mapper struct {
	dc  discoverer
	now func() time.Time

	mu       sync.Mutex
	gvs      map[schema.GroupVersion]*gvState
	inflight map[schema.GroupVersion]*call
	groups   map[string][]string // group → versions, preferred first
	groupsAt time.Time
	groupsIn *call
}

var _ meta.RESTMapper = (*Mapper)(nil)

// New returns a Mapper that discovers through httpClient (cfg gives the
// host, path prefix and content settings). Its signature is
// controller-runtime's cluster.Options.MapperProvider.
func New(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
	return newForConfig(cfg, httpClient)
}

// NewWithCore returns a constructor like New whose Mappers start from core,
// the core group's resource list (GET /api/v1) the caller read already, as
// if they had fetched it then. A core list that does not decode (or none)
// is left out: the Mapper asks for it itself.
func NewWithCore(core []byte) func(*rest.Config, *http.Client) (meta.RESTMapper, error) {
	return func(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
		m, err := newForConfig(cfg, httpClient)
		if err == nil && core != nil {
			_ = m.Seed(schema.GroupVersion{Version: "v1"}, core)
		}
		return m, err
	}
}

func newForConfig(cfg *rest.Config, httpClient *http.Client) (*Mapper, error) {
	if httpClient == nil {
		return nil, errors.New("leanmapper: httpClient must not be nil")
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	// The group list is read in its plain form: the aggregated one
	// carries every resource of every group.
	dc.UseLegacyDiscovery = true
	return newMapper(httpDiscoverer{dc}), nil
}

func newMapper(dc discoverer) *Mapper {
	return &Mapper{
		dc: dc, now: time.Now,
		gvs:      map[schema.GroupVersion]*gvState{},
		inflight: map[schema.GroupVersion]*call{},
	}
}

// resources returns gv's resources; served is false (and err nil) when
// the server does not serve gv. want reports whether the resources hold
// what the caller looks for: if not, resources fetches gv again unless
// its copy is younger than negativeTTL.
func (m *Mapper) resources(gv schema.GroupVersion, want func([]resource) bool) (rs []resource, served bool, err error) {
	refetched := false
	for {
		m.mu.Lock()
		st := m.gvs[gv]
		if st != nil {
			fresh := m.now().Sub(st.fetched) < negativeTTL
			if st.list != nil && (want(st.list.resources) || fresh || refetched) {
				m.mu.Unlock()
				return st.list.resources, true, nil
			}
			if st.list == nil && (fresh || refetched) {
				m.mu.Unlock()
				return nil, false, nil
			}
		}
		c := m.inflight[gv]
		if c == nil {
			c = &call{done: make(chan struct{})}
			m.inflight[gv] = c
			m.mu.Unlock()
			m.fetch(gv, c)
		} else {
			m.mu.Unlock()
			<-c.done
		}
		if c.err != nil {
			return nil, false, c.err
		}
		refetched = true
	}
}

// fetch asks for gv's resources and records the answer; c ends when it is.
func (m *Mapper) fetch(gv schema.GroupVersion, c *call) {
	body, err := m.dc.GroupVersion(gv.String())
	st := &gvState{fetched: m.now()}
	switch {
	case err == nil:
		st.list, err = decodeGroupVersion(gv, body)
	case apierrors.IsNotFound(err):
		err = nil
	default:
		err = fmt.Errorf("discovering %s: %w", gv, err)
	}
	m.mu.Lock()
	if err == nil {
		m.gvs[gv] = st
	}
	delete(m.inflight, gv)
	c.err = err
	m.mu.Unlock()
	close(c.done)
}

// Seed records body, the JSON resource list of gv the caller read from the
// API server (GET GroupVersionPath), as if the Mapper had fetched it now:
// a member's probe reads the core group's, which its controllers map
// first, so that they need not ask again. A body that does not decode is
// an error and changes nothing.
func (m *Mapper) Seed(gv schema.GroupVersion, body []byte) error {
	list, err := decodeGroupVersion(gv, body)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gvs[gv] = &gvState{list: list, fetched: m.now()}
	return nil
}

// decodeGroupVersion decodes gv's resource list, naming gv if it cannot.
func decodeGroupVersion(gv schema.GroupVersion, body []byte) (*resourceList, error) {
	list, err := decode(body)
	if err != nil {
		return nil, fmt.Errorf("decoding the resources of %s: %w", gv, err)
	}
	return list, nil
}

// compact keeps of list what mapping needs: top-level resources (no
// subresources), their names, kind and scope.
func compact(list *metav1.APIResourceList) []resource {
	rs := make([]resource, 0, len(list.APIResources))
	for _, r := range list.APIResources {
		if r.Name == "" || strings.Contains(r.Name, "/") {
			continue
		}
		singular := r.SingularName
		if singular == "" {
			singular = strings.ToLower(r.Kind)
		}
		rs = append(rs, resource{
			plural: strings.ToLower(r.Name), singular: strings.ToLower(singular),
			kind: r.Kind, namespaced: r.Namespaced,
		})
	}
	return rs
}

// versions returns the versions of group the server serves, preferred
// first; none if it does not serve the group.
func (m *Mapper) versions(group string) ([]string, error) {
	if group == "" {
		return []string{"v1"}, nil
	}
	refetched := false
	for {
		m.mu.Lock()
		if m.groups != nil {
			age := m.now().Sub(m.groupsAt)
			vs, ok := m.groups[group]
			if (ok && age < groupsTTL) || age < negativeTTL || refetched {
				m.mu.Unlock()
				return vs, nil
			}
		}
		c := m.groupsIn
		if c == nil {
			c = &call{done: make(chan struct{})}
			m.groupsIn = c
			m.mu.Unlock()
			m.fetchGroups(c)
		} else {
			m.mu.Unlock()
			<-c.done
		}
		if c.err != nil {
			return nil, c.err
		}
		refetched = true
	}
}

func (m *Mapper) fetchGroups(c *call) {
	list, err := m.dc.ServerGroups()
	var groups map[string][]string
	if err == nil {
		groups = make(map[string][]string, len(list.Groups))
		for _, g := range list.Groups {
			vs := make([]string, 0, len(g.Versions))
			if g.PreferredVersion.Version != "" {
				vs = append(vs, g.PreferredVersion.Version)
			}
			for _, v := range g.Versions {
				if v.Version != g.PreferredVersion.Version {
					vs = append(vs, v.Version)
				}
			}
			groups[g.Name] = vs
		}
	} else {
		err = fmt.Errorf("discovering API groups: %w", err)
	}
	m.mu.Lock()
	if err == nil {
		m.groups, m.groupsAt = groups, m.now()
	}
	m.groupsIn = nil
	c.err = err
	m.mu.Unlock()
	close(c.done)
}

// explicit returns the versions given, without empty and internal ones.
func explicit(versions []string) []string {
	var out []string
	for _, v := range versions {
		if v != "" && v != runtime.APIVersionInternal {
			out = append(out, v)
		}
	}
	return out
}

// candidates returns the versions to look in: those given, or else the
// group's.
func (m *Mapper) candidates(group string, versions ...string) ([]string, error) {
	if vs := explicit(versions); len(vs) > 0 {
		return vs, nil
	}
	return m.versions(group)
}

func hasKind(kind string) func([]resource) bool {
	return func(rs []resource) bool { return kindIn(rs, kind) != nil }
}

// kindIn returns the resource of kind in rs, matching as client-go's
// discovery REST mapper does: the kind, its lower-case form, and the kind
// with "List" appended; nil if none.
func kindIn(rs []resource, kind string) *resource {
	base, list := strings.CutSuffix(kind, "List")
	for i, r := range rs {
		if r.kind == kind || strings.ToLower(r.kind) == kind || (list && r.kind == base) {
			return &rs[i]
		}
	}
	return nil
}

func hasResource(name string) func([]resource) bool {
	return func(rs []resource) bool {
		for _, r := range rs {
			if r.plural == name || r.singular == name {
				return true
			}
		}
		return false
	}
}

// mapping maps kind in gv, a kind of rs, or nil. Like client-go's
// discovery REST mapper, it maps "<Kind>List" and "List" too, to a guessed
// resource.
func mapping(gv schema.GroupVersion, rs []resource, kind string) *meta.RESTMapping {
	gvk := gv.WithKind(kind)
	if kind == "List" {
		plural, _ := meta.UnsafeGuessKindToResource(gvk)
		return &meta.RESTMapping{Resource: plural, GroupVersionKind: gvk, Scope: meta.RESTScopeRoot}
	}
	r := kindIn(rs, kind)
	if r == nil {
		return nil
	}
	scope := meta.RESTScopeRoot
	if r.namespaced {
		scope = meta.RESTScopeNamespace
	}
	res := gv.WithResource(r.plural)
	if r.kind != kind && strings.ToLower(r.kind) != kind {
		res, _ = meta.UnsafeGuessKindToResource(gvk)
	}
	return &meta.RESTMapping{Resource: res, GroupVersionKind: gvk, Scope: scope}
}

// mappings returns gk's mappings in the versions given (or the group's),
// the first one found only when all is false.
func (m *Mapper) mappings(gk schema.GroupKind, all bool, versions []string) ([]*meta.RESTMapping, error) {
	vs, err := m.candidates(gk.Group, versions...)
	if err != nil {
		return nil, err
	}
	var out []*meta.RESTMapping
	for _, v := range vs {
		gv := schema.GroupVersion{Group: gk.Group, Version: v}
		rs, served, err := m.resources(gv, hasKind(gk.Kind))
		if err != nil {
			return nil, err
		}
		if !served {
			continue
		}
		if mp := mapping(gv, rs, gk.Kind); mp != nil {
			out = append(out, mp)
		}
		if len(out) > 0 && !all {
			break
		}
	}
	if len(out) == 0 {
		return nil, &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: versions}
	}
	return out, nil
}

// RESTMapping returns the mapping of gk in the first of versions that
// serves it, or, with no versions, in the group's preferred version or
// else its others.
func (m *Mapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	ms, err := m.mappings(gk, false, versions)
	if err != nil {
		return nil, err
	}
	return ms[0], nil
}

// RESTMappings returns the mappings of gk in every one of versions (or of
// the group's versions) that serves it.
func (m *Mapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	return m.mappings(gk, true, versions)
}

// lookup returns the (plural resource, kind) pairs that match input, in
// the order of the versions looked in.
func (m *Mapper) lookup(input schema.GroupVersionResource) ([]schema.GroupVersionResource, []schema.GroupVersionKind, error) {
	name := strings.ToLower(input.Resource)
	vs, err := m.candidates(input.Group, input.Version)
	if err != nil {
		return nil, nil, err
	}
	var gvrs []schema.GroupVersionResource
	var gvks []schema.GroupVersionKind
	for _, v := range vs {
		gv := schema.GroupVersion{Group: input.Group, Version: v}
		rs, served, err := m.resources(gv, hasResource(name))
		if err != nil {
			return nil, nil, err
		}
		if !served {
			continue
		}
		for _, r := range rs {
			if r.plural == name || r.singular == name {
				gvrs = append(gvrs, gv.WithResource(r.plural))
				gvks = append(gvks, gv.WithKind(r.kind))
				break
			}
		}
	}
	if len(gvrs) == 0 {
		return nil, nil, &meta.NoResourceMatchError{PartialResource: input}
	}
	return gvrs, gvks, nil
}

// KindFor returns the kind of resource (plural or singular name), in its
// version or else the group's preferred one.
func (m *Mapper) KindFor(resource schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	_, gvks, err := m.lookup(resource)
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	return gvks[0], nil
}

// KindsFor returns the kinds of resource in its version or in each of
// the group's, preferred first.
func (m *Mapper) KindsFor(resource schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	_, gvks, err := m.lookup(resource)
	return gvks, err
}

// ResourceFor returns the plural resource of resource, in its version or
// else the group's preferred one.
func (m *Mapper) ResourceFor(input schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	gvrs, _, err := m.lookup(input)
	if err != nil {
		return schema.GroupVersionResource{}, err
	}
	return gvrs[0], nil
}

// ResourcesFor returns the plural resources of input in its version or in
// each of the group's, preferred first.
func (m *Mapper) ResourcesFor(input schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	gvrs, _, err := m.lookup(input)
	return gvrs, err
}

// ResourceSingularizer returns the singular name of a plural resource
// name, from the group-versions fetched so far.
func (m *Mapper) ResourceSingularizer(name string) (string, error) {
	name = strings.ToLower(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, st := range m.gvs {
		if st.list == nil {
			continue
		}
		for _, r := range st.list.resources {
			if r.plural == name {
				return r.singular, nil
			}
		}
	}
	return name, fmt.Errorf("no singular of resource %q has been discovered", name)
}
