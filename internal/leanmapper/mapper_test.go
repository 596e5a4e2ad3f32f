package leanmapper

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/mccr-dev/mccr/internal/fakeapi"
)

func init() { ctrllog.SetLogger(logr.Discard()) }

var widgetGV = schema.GroupVersion{Group: "widgets.mccr.test", Version: "v1"}

func widgetResources(kinds ...string) []metav1.APIResource {
	rs := make([]metav1.APIResource, 0, 2*len(kinds))
	for _, k := range kinds {
		rs = append(rs,
			metav1.APIResource{Name: k + "s", SingularName: k, Kind: "W" + k[1:], Namespaced: k != "cluster", Verbs: metav1.Verbs{"get", "list"}},
			metav1.APIResource{Name: k + "s/status", Kind: "W" + k[1:], Namespaced: true})
	}
	return rs
}

func fakeMapper(t *testing.T) (*fakeapi.Server, *Mapper, *time.Time) {
	t.Helper()
	s := fakeapi.New()
	s.Start()
	t.Cleanup(s.Close)
	cfg := s.Config()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := New(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	m := rm.(*Mapper)
	now := time.Now()
	m.now = func() time.Time { return now }
	return s, m, &now
}

func TestCoreFromOneRequest(t *testing.T) {
	s, m, _ := fakeMapper(t)
	before := s.RequestCount()
	cm, err := m.RESTMapping(schema.GroupKind{Kind: "ConfigMap"}, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if cm.Resource != (schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}) || cm.Scope.Name() != meta.RESTScopeNameNamespace {
		t.Errorf("ConfigMap mapping = %+v, scope %s", cm.Resource, cm.Scope.Name())
	}
	ns, err := m.RESTMapping(schema.GroupKind{Kind: "Namespace"}, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if ns.Resource.Resource != "namespaces" || ns.Scope.Name() != meta.RESTScopeNameRoot || ns.GroupVersionKind != (schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}) {
		t.Errorf("Namespace mapping = %+v, scope %s", ns, ns.Scope.Name())
	}
	// Unversioned, and by resource: the core group has v1 only.
	if _, err := m.RESTMapping(schema.GroupKind{Kind: "Secret"}); err != nil {
		t.Error(err)
	}
	for _, r := range []string{"secrets", "secret", "Secrets"} {
		gvk, err := m.KindFor(schema.GroupVersionResource{Resource: r})
		if err != nil || gvk != (schema.GroupVersionKind{Version: "v1", Kind: "Secret"}) {
			t.Errorf("KindFor(%s) = %v, %v", r, gvk, err)
		}
		gvr, err := m.ResourceFor(schema.GroupVersionResource{Version: "v1", Resource: r})
		if err != nil || gvr.Resource != "secrets" {
			t.Errorf("ResourceFor(%s) = %v, %v", r, gvr, err)
		}
	}
	if sg, err := m.ResourceSingularizer("configmaps"); err != nil || sg != "configmap" {
		t.Errorf("ResourceSingularizer = %q, %v", sg, err)
	}
	if got := s.RequestCount() - before; got != 1 {
		t.Errorf("%d requests, want 1 (GET /api/v1)", got)
	}
}

func TestLateGroupVersion(t *testing.T) {
	s, m, now := fakeMapper(t)
	gk := schema.GroupKind{Group: widgetGV.Group, Kind: "Widget"}
	_, err := m.RESTMapping(gk, "v1")
	var nk *meta.NoKindMatchError
	if !errors.As(err, &nk) || !meta.IsNoMatchError(err) {
		t.Fatalf("RESTMapping of a kind not served = %v, want a NoKindMatchError", err)
	}
	if _, err := m.KindFor(widgetGV.WithResource("widgets")); !meta.IsNoMatchError(err) {
		t.Errorf("KindFor of a resource not served = %v, want a no-match error", err)
	}

	s.ServeDiscovery(widgetGV, widgetResources("widget"))
	// Within negativeTTL, the 404 stands.
	if _, err := m.RESTMapping(gk, "v1"); !meta.IsNoMatchError(err) {
		t.Errorf("RESTMapping right after a 404 = %v, want the no-match kept", err)
	}
	*now = now.Add(negativeTTL)
	mp, err := m.RESTMapping(gk, "v1")
	if err != nil {
		t.Fatalf("RESTMapping once served: %v", err)
	}
	if mp.Resource != widgetGV.WithResource("widgets") || mp.Scope.Name() != meta.RESTScopeNameNamespace {
		t.Errorf("mapping = %+v", mp)
	}
	// Found: kept, no more requests.
	before := s.RequestCount()
	*now = now.Add(time.Hour)
	if _, err := m.RESTMapping(gk, "v1"); err != nil {
		t.Fatal(err)
	}
	if n := s.RequestCount() - before; n != 0 {
		t.Errorf("%d requests for a mapping found before", n)
	}

	// A second kind of the same group-version, installed later: the miss
	// fetches the group-version again, at most once per negativeTTL.
	gk2 := schema.GroupKind{Group: widgetGV.Group, Kind: "Wadget"}
	s.ServeDiscovery(widgetGV, widgetResources("widget", "wadget"))
	if _, err := m.RESTMapping(gk2, "v1"); err != nil {
		t.Fatalf("RESTMapping of a kind added to a known group-version: %v", err)
	}
	before = s.RequestCount()
	for range 3 {
		if _, err := m.RESTMapping(schema.GroupKind{Group: widgetGV.Group, Kind: "Nope"}, "v1"); !meta.IsNoMatchError(err) {
			t.Fatalf("RESTMapping of a missing kind = %v", err)
		}
	}
	if n := s.RequestCount() - before; n != 0 {
		t.Errorf("%d requests for misses within negativeTTL of a fetch, want 0", n)
	}
	*now = now.Add(negativeTTL)
	if _, err := m.RESTMapping(schema.GroupKind{Group: widgetGV.Group, Kind: "Nope"}, "v1"); !meta.IsNoMatchError(err) {
		t.Fatal(err)
	}
	if n := s.RequestCount() - before; n != 1 {
		t.Errorf("%d requests for a miss after negativeTTL, want 1", n)
	}
}

func TestUnversioned(t *testing.T) {
	s, m, now := fakeMapper(t)
	s.ServeDiscovery(widgetGV, widgetResources("widget"))
	beta := schema.GroupVersion{Group: widgetGV.Group, Version: "v2beta1"}
	s.ServeDiscovery(beta, widgetResources("widget", "wadget"))

	mp, err := m.RESTMapping(schema.GroupKind{Group: widgetGV.Group, Kind: "Widget"})
	if err != nil || mp.GroupVersionKind.Version != "v1" {
		t.Fatalf("RESTMapping without versions = %+v, %v; want the preferred version v1", mp, err)
	}
	mp, err = m.RESTMapping(schema.GroupKind{Group: widgetGV.Group, Kind: "Wadget"})
	if err != nil || mp.GroupVersionKind.Version != "v2beta1" {
		t.Errorf("RESTMapping of a kind only in v2beta1 = %+v, %v", mp, err)
	}
	ms, err := m.RESTMappings(schema.GroupKind{Group: widgetGV.Group, Kind: "Widget"})
	if err != nil || len(ms) != 2 || ms[0].GroupVersionKind.Version != "v1" || ms[1].GroupVersionKind.Version != "v2beta1" {
		t.Errorf("RESTMappings = %v, %v", ms, err)
	}
	gvrs, err := m.ResourcesFor(schema.GroupVersionResource{Group: widgetGV.Group, Resource: "widget"})
	if err != nil || !slices.Equal(gvrs, []schema.GroupVersionResource{widgetGV.WithResource("widgets"), beta.WithResource("widgets")}) {
		t.Errorf("ResourcesFor = %v, %v", gvrs, err)
	}
	gvks, err := m.KindsFor(schema.GroupVersionResource{Group: widgetGV.Group, Resource: "wadgets"})
	if err != nil || !slices.Equal(gvks, []schema.GroupVersionKind{beta.WithKind("Wadget")}) {
		t.Errorf("KindsFor = %v, %v", gvks, err)
	}

	// A group that appears later is found once negativeTTL has passed.
	late := schema.GroupVersion{Group: "late.mccr.test", Version: "v1"}
	if _, err := m.RESTMapping(schema.GroupKind{Group: late.Group, Kind: "Widget"}); !meta.IsNoMatchError(err) {
		t.Fatalf("RESTMapping of a group not served = %v", err)
	}
	s.ServeDiscovery(late, widgetResources("widget"))
	*now = now.Add(negativeTTL)
	if _, err := m.RESTMapping(schema.GroupKind{Group: late.Group, Kind: "Widget"}); err != nil {
		t.Errorf("RESTMapping of a group served later: %v", err)
	}
}

// fakeDiscovery counts requests and can hold them or fail them.
type fakeDiscovery struct {
	calls atomic.Int64
	gate  chan struct{}
	mu    sync.Mutex
	err   error
}

func (f *fakeDiscovery) GroupVersion(gv string) ([]byte, error) {
	f.calls.Add(1)
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return json.Marshal(&metav1.APIResourceList{GroupVersion: gv, APIResources: widgetResources("widget")})
}

func (f *fakeDiscovery) ServerGroups() (*metav1.APIGroupList, error) {
	return nil, errors.New("not used")
}

func TestOneRequestPerGroupVersion(t *testing.T) {
	fd := &fakeDiscovery{gate: make(chan struct{})}
	m := newMapper(fd)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() {
			_, err := m.RESTMapping(schema.GroupKind{Group: widgetGV.Group, Kind: "Widget"}, "v1")
			errs <- err
		})
	}
	for fd.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	close(fd.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := fd.calls.Load(); n != 1 {
		t.Errorf("%d requests for 50 concurrent lookups, want 1", n)
	}
}

func TestErrorsNotKept(t *testing.T) {
	fd := &fakeDiscovery{err: apierrors.NewServiceUnavailable("down")}
	m := newMapper(fd)
	gk := schema.GroupKind{Group: widgetGV.Group, Kind: "Widget"}
	_, err := m.RESTMapping(gk, "v1")
	if err == nil || meta.IsNoMatchError(err) || !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("RESTMapping while discovery fails = %v, want the failure", err)
	}
	fd.mu.Lock()
	fd.err = nil
	fd.mu.Unlock()
	if _, err := m.RESTMapping(gk, "v1"); err != nil {
		t.Errorf("RESTMapping once discovery works again: %v", err)
	}
	if n := fd.calls.Load(); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}

// TestSeedSavesTheRequest: a resource list read by someone else (a
// member's probe) serves the mappings without a request; a body that is
// not a resource list is refused and changes nothing.
func TestSeedSavesTheRequest(t *testing.T) {
	s, m, now := fakeMapper(t)
	core := schema.GroupVersion{Version: "v1"}
	if err := m.Seed(core, []byte(`{"kind":"APIResourceList"`)); err == nil {
		t.Error("Seed of a truncated body succeeded")
	}
	body, err := json.Marshal(&metav1.APIResourceList{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "configmaps", SingularName: "configmap", Namespaced: true, Kind: "ConfigMap"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Seed(core, body); err != nil {
		t.Fatal(err)
	}
	before := s.RequestCount()
	if mp, err := m.RESTMapping(schema.GroupKind{Kind: "ConfigMap"}, "v1"); err != nil || mp.Resource.Resource != "configmaps" {
		t.Fatalf("RESTMapping(ConfigMap) = %v, %v", mp, err)
	}
	if got := s.RequestCount() - before; got != 0 {
		t.Errorf("%d requests after Seed, want 0", got)
	}
	// A kind the seed lacks is looked for again, as after a fetch.
	*now = now.Add(2 * negativeTTL)
	if _, err := m.RESTMapping(schema.GroupKind{Kind: "Secret"}, "v1"); err != nil {
		t.Errorf("RESTMapping(Secret) once the seed is older than negativeTTL: %v", err)
	}
	if got := s.RequestCount() - before; got != 1 {
		t.Errorf("%d requests for a kind the seed lacks, want 1", got)
	}
}

// TestMappersShareDecodedLists: mappers that read the same document keep
// one decoded copy of it, and the copy goes once no mapper holds it.
func TestMappersShareDecodedLists(t *testing.T) {
	body, err := json.Marshal(&metav1.APIResourceList{GroupVersion: "v1", APIResources: widgetResources("shared-test-widget")})
	if err != nil {
		t.Fatal(err)
	}
	a, b := newMapper(&fakeDiscovery{}), newMapper(&fakeDiscovery{})
	gv := schema.GroupVersion{Group: "shared.example.com", Version: "v1"}
	for _, m := range []*Mapper{a, b} {
		if err := m.Seed(gv, body); err != nil {
			t.Fatal(err)
		}
	}
	if a.gvs[gv].list != b.gvs[gv].list {
		t.Error("two mappers decoded the same document into two copies")
	}
	sum := sha256.Sum256(body)
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	a, b = nil, nil
	deadline := time.Now().Add(10 * time.Second)
	for lookupEntry(sum) {
		if time.Now().After(deadline) {
			t.Fatal("the decoded list is still kept once no mapper holds it")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

func lookupEntry(sum [sha256.Size]byte) bool {
	decoded.mu.Lock()
	defer decoded.mu.Unlock()
	_, ok := decoded.m[sum]
	return ok
}

// TestNewWithCore: mappers made by NewWithCore map core kinds from the list
// given, without a request; without a list they ask for it.
func TestNewWithCore(t *testing.T) {
	s, _, _ := fakeMapper(t)
	hc, err := rest.HTTPClientFor(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(&metav1.APIResourceList{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "configmaps", SingularName: "configmap", Namespaced: true, Kind: "ConfigMap"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		core     []byte
		requests int64
	}{{body, 0}, {nil, 1}} {
		m, err := NewWithCore(tc.core)(s.Config(), hc)
		if err != nil {
			t.Fatal(err)
		}
		before := s.RequestCount()
		if _, err := m.RESTMapping(schema.GroupKind{Kind: "ConfigMap"}, "v1"); err != nil {
			t.Fatal(err)
		}
		if got := s.RequestCount() - before; got != tc.requests {
			t.Errorf("with a core list of %d bytes: %d requests, want %d", len(tc.core), got, tc.requests)
		}
	}
}
