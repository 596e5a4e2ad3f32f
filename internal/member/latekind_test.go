package member

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/internal/conntrack"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/test"
)

// The package's real API server, started by the first test that needs it
// and stopped by TestMain.
var realAPI struct {
	once  sync.Once
	fleet *test.Fleet
	err   error
}

// apiServer returns the package's real API server, starting it on first
// use. Call it before leakCheck: its processes' goroutines outlive the
// test.
func apiServer(t *testing.T) *test.Cluster {
	t.Helper()
	realAPI.once.Do(func() { realAPI.fleet, realAPI.err = test.Start(test.Options{}, "member") })
	if realAPI.err != nil {
		t.Fatal(realAPI.err)
	}
	return realAPI.fleet.Cluster("member")
}

func stopAPIServer() error {
	if realAPI.fleet == nil {
		return nil
	}
	return realAPI.fleet.Stop()
}

// onAPIServer returns a config of the package's API server whose
// connections (of the member under test and of the test's own clients)
// are closed when the test ends, before its leak check; and an admin
// client through it. Call it after leakCheck.
func onAPIServer(t *testing.T, cl *test.Cluster) (*rest.Config, client.Client) {
	t.Helper()
	cfg, conns := conntrack.Wrap(cl.Config)
	t.Cleanup(conns.Close)
	admin, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, admin
}

var crdSeq atomic.Int64

// widgetCRD returns a CRD of a group of its own, not installed anywhere,
// and the kind it serves.
func widgetCRD() (*apiextensionsv1.CustomResourceDefinition, schema.GroupVersionKind) {
	group := fmt.Sprintf("late%d.mccr.test", crdSeq.Add(1))
	return test.OpenCRD(group, "Widget", true), schema.GroupVersionKind{Group: group, Version: "v1", Kind: "Widget"}
}

func newUnstructured(gvk schema.GroupVersionKind) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}

// names is a reconciler that sends the names it reconciles.
func names(ch chan<- string) reconcile.Func {
	return func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
		select {
		case ch <- req.Name:
		default:
		}
		return reconcile.Result{}, nil
	}
}

// awaitName waits for name on ch.
func awaitName(t *testing.T, ch <-chan string, name string, d time.Duration, what string) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case got := <-ch:
			if got == name {
				return
			}
		case <-deadline:
			t.Fatalf("not within %v: %s", d, what)
		}
	}
}

// lateKindMember builds, on a real API server, a member caching namespace
// ns with a ConfigMap controller and a controller for gvk.
func lateKindMember(t *testing.T, cfg *rest.Config, ns string, gvk schema.GroupVersionKind) (m *Manager, cms, widgets chan string) {
	t.Helper()
	m = buildOn(t, cfg, BuildOptions{
		Options: Options{Controller: config.Controller{SkipNameValidation: ptr.To(true)}},
		Cluster: func(co *cluster.Options) { co.Cache.DefaultNamespaces = map[string]cache.Config{ns: {}} },
	})
	cms, widgets = make(chan string, 100), make(chan string, 100)
	if err := ctrl.NewControllerManagedBy(m).Named("configmaps").For(&corev1.ConfigMap{}).Complete(names(cms)); err != nil {
		t.Fatal(err)
	}
	if err := ctrl.NewControllerManagedBy(m).Named("widgets").For(newUnstructured(gvk)).Complete(names(widgets)); err != nil {
		t.Fatal(err)
	}
	return m, cms, widgets
}

func createNamespace(t *testing.T, admin client.Client) string {
	t.Helper()
	ns := test.NamespaceName(t)
	if err := admin.Create(context.Background(), namespace(ns)); err != nil {
		t.Fatal(err)
	}
	return ns
}

// TestLateCRD: a member whose controller watches a kind its cluster does
// not serve yet is Ready and runs its other controllers; the controller
// starts once the CRD is installed, without a restart of the member.
func TestLateCRD(t *testing.T) {
	cl := apiServer(t)
	leakcheck.Cleanup(t)
	cfg, admin := onAPIServer(t, cl)
	ctx := context.Background()
	ns := createNamespace(t, admin)
	crd, gvk := widgetCRD()
	m, cms, widgets := lateKindMember(t, cfg, ns, gvk)
	r := run(t, m)

	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !m.WaitForSync(sctx) {
		t.Fatal("WaitForSync = false while one controller waits for its CRD")
	}
	if got, want := m.WaitingKinds(), []string{gvk.String()}; !slices.Equal(got, want) {
		t.Errorf("WaitingKinds = %q, want %q", got, want)
	}
	if err := admin.Create(ctx, configMap(ns, "x")); err != nil {
		t.Fatal(err)
	}
	awaitName(t, cms, "x", 10*time.Second, "the ConfigMap controller reconciles while the other waits for its CRD")

	if err := test.InstallCRDObjects(cfg, crd); err != nil {
		t.Fatal(err)
	}
	installed := time.Now() // served: InstallCRDs waits for that
	w := newUnstructured(gvk)
	w.SetNamespace(ns)
	w.SetName("w")
	if err := admin.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	awaitName(t, widgets, "w", 20*time.Second, "the waiting controller reconciles a Widget once its CRD is installed")
	took := time.Since(installed)
	t.Logf("figure: CRD installed → waiting controller's first reconcile: %v", took.Round(time.Millisecond))
	if took > kindPollCap+5*time.Second {
		t.Errorf("the waiting controller started %v after its CRD was served; it polls at most %v apart", took, kindPollCap)
	}
	test.Eventually(t, 5*time.Second, "WaitingKinds empty once the CRD is served", func() bool { return len(m.WaitingKinds()) == 0 })

	// The member carried on: no restart, no failure.
	select {
	case err := <-r.done:
		t.Fatalf("Start returned %v while the CRD was awaited", err)
	default:
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Start = %v", err)
	}
}

// TestStopWhileWaitingForKind: a member stops promptly, and leaves nothing
// behind, while a controller of it waits for its kind.
func TestStopWhileWaitingForKind(t *testing.T) {
	cl := apiServer(t)
	leakcheck.Cleanup(t)
	cfg, admin := onAPIServer(t, cl)
	ns := createNamespace(t, admin)
	_, gvk := widgetCRD() // never installed
	m, _, _ := lateKindMember(t, cfg, ns, gvk)
	r := run(t, m)
	if !m.WaitForSync(syncCtx(t)) {
		t.Fatal("WaitForSync = false while one controller waits for its CRD")
	}
	if len(m.WaitingKinds()) != 1 {
		t.Fatalf("WaitingKinds = %q, want the Widget kind", m.WaitingKinds())
	}
	begin := time.Now()
	r.cancel()
	if err := r.wait(t, 5*time.Second); err != nil {
		t.Errorf("Start = %v", err)
	}
	t.Logf("Start returned %v after its ctx ended", time.Since(begin).Round(time.Millisecond))
	// The source's goroutine, which controller-runtime does not wait
	// for, returns on its own.
	test.Eventually(t, 5*time.Second, "WaitingKinds empty once the member stopped", func() bool { return len(m.WaitingKinds()) == 0 })
}

// TestWaitingNeedsAWarmup: outside a warm-up, a missing kind is an error at
// once, as in controller-runtime: a read, or a GetInformer of the user's.
func TestWaitingNeedsAWarmup(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newFake(t)
	m := build(t, s, BuildOptions{})
	r := run(t, m)
	if !m.WaitForSync(syncCtx(t)) {
		t.Fatal("WaitForSync = false")
	}
	gvk := schema.GroupVersionKind{Group: "missing.mccr.test", Version: "v1", Kind: "Widget"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := m.GetCache().GetInformer(ctx, newUnstructured(gvk)); !meta.IsNoMatchError(err) {
		t.Errorf("GetInformer of a kind not served = %v, want a no-match error", err)
	}
	if _, err := m.GetCache().GetInformerForKind(ctx, gvk); err == nil {
		t.Error("GetInformerForKind of a kind not served = nil error")
	}
	if err := m.GetCache().Get(ctx, client.ObjectKey{Namespace: "a", Name: "w"}, newUnstructured(gvk)); !meta.IsNoMatchError(err) {
		t.Errorf("Get of a kind not served = %v, want a no-match error", err)
	}
	if ctx.Err() != nil {
		t.Error("calls without a warm-up waited")
	}
	if kinds := m.WaitingKinds(); len(kinds) != 0 {
		t.Errorf("WaitingKinds = %q", kinds)
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Start = %v", err)
	}
}

func TestControllerCacheSyncTimeoutDefault(t *testing.T) {
	s := newFake(t)
	if got := build(t, s, BuildOptions{}).GetControllerOptions().CacheSyncTimeout; got != DefaultControllerCacheSyncTimeout {
		t.Errorf("CacheSyncTimeout left zero = %v, want DefaultControllerCacheSyncTimeout", got)
	}
	opts := BuildOptions{Options: Options{Controller: config.Controller{CacheSyncTimeout: time.Minute}}}
	if got := build(t, s, opts).GetControllerOptions().CacheSyncTimeout; got != time.Minute {
		t.Errorf("CacheSyncTimeout set to 1m = %v, want it kept", got)
	}
}

func TestKindSetCounts(t *testing.T) {
	s := newKindSet()
	s.add("b", 1)
	s.add("a", 1)
	s.add("b", 1)
	s.add("b", -1)
	if got := s.list(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("list = %q, want [a b]", got)
	}
	s.add("a", -1)
	s.add("b", -1)
	if got := s.list(); got != nil {
		t.Errorf("list of an emptied set = %q", got)
	}
	var none *kindSet
	none.add("a", 1)
	if none.list() != nil {
		t.Error("a nil set lists kinds")
	}
}
