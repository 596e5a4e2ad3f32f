package fakeapi_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/mccr-dev/mccr/internal/fakeapi"
	"github.com/mccr-dev/mccr/internal/leakcheck"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

func cm(ns, name string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Data:       map[string]string{"k": "v"},
	}
}

func ns(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func start(t *testing.T, opts ...fakeapi.Option) *fakeapi.Server {
	t.Helper()
	s := fakeapi.New(opts...)
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func newClient(t *testing.T, cfg *rest.Config) client.WithWatch {
	t.Helper()
	c, err := client.NewWithWatch(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startCluster starts a controller-runtime cluster against cfg and waits
// for its cache. stop ends it, waits for Start to return and closes the
// cluster's idle connections.
func startCluster(cfg *rest.Config) (c cluster.Cluster, stop func() error, err error) {
	if c, err = cluster.New(cfg); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Start(ctx) }()
	stop = func() error {
		cancel()
		defer c.GetHTTPClient().CloseIdleConnections()
		return <-errc
	}
	syncCtx, syncCancel := context.WithTimeout(ctx, 10*time.Second)
	defer syncCancel()
	if !c.GetCache().WaitForCacheSync(syncCtx) {
		return nil, nil, errors.Join(errors.New("cache did not sync"), stop())
	}
	return c, stop, nil
}

func runCluster(t *testing.T, cfg *rest.Config) (cluster.Cluster, func()) {
	t.Helper()
	c, stop, err := startCluster(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestClusterCacheAndWatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []fakeapi.Option
	}{
		{"watch-list", nil},
		{"list-then-watch", []fakeapi.Option{fakeapi.WithoutWatchList()}},
		{"plain-http", []fakeapi.Option{fakeapi.WithPlainHTTP()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fakeapi.New(tc.opts...)
			s.Seed(ns("a"), ns("b"), cm("a", "one", map[string]string{"app": "x"}), cm("b", "two", nil))
			s.Start()
			defer s.Close()
			c, stop := runCluster(t, s.Config())
			defer stop()
			ctx := context.Background()

			got := &corev1.ConfigMap{}
			if err := c.GetCache().Get(ctx, client.ObjectKey{Namespace: "a", Name: "one"}, got); err != nil {
				t.Fatal(err)
			}
			if got.Data["k"] != "v" || got.UID == "" || got.ResourceVersion == "" {
				t.Fatalf("unexpected object %+v", got)
			}
			list := &corev1.ConfigMapList{}
			if err := c.GetCache().List(ctx, list); err != nil || len(list.Items) != 2 {
				t.Fatalf("cached list: %v, %d items", err, len(list.Items))
			}
			if err := c.GetCache().List(ctx, list, client.InNamespace("b")); err != nil || len(list.Items) != 1 {
				t.Fatalf("cached list in b: %v, %d items", err, len(list.Items))
			}

			// A write through the live client reaches the cache by watch.
			if err := c.GetClient().Create(ctx, cm("a", "new", nil)); err != nil {
				t.Fatal(err)
			}
			eventually(t, 10*time.Second, "created ConfigMap in cache", func() bool {
				return c.GetCache().Get(ctx, client.ObjectKey{Namespace: "a", Name: "new"}, got) == nil
			})
			// Secrets and Namespaces work as well.
			if err := c.GetClient().Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "s"},
				StringData: map[string]string{"p": "w"}}); err != nil {
				t.Fatal(err)
			}
			sec := &corev1.Secret{}
			eventually(t, 10*time.Second, "created Secret in cache", func() bool {
				return c.GetCache().Get(ctx, client.ObjectKey{Namespace: "a", Name: "s"}, sec) == nil
			})
			if string(sec.Data["p"]) != "w" || sec.Type != corev1.SecretTypeOpaque {
				t.Fatalf("secret not normalized: %+v", sec)
			}
			nsl := &corev1.NamespaceList{}
			if err := c.GetCache().List(ctx, nsl); err != nil || len(nsl.Items) != 2 {
				t.Fatalf("namespaces: %v, %d", err, len(nsl.Items))
			}
		})
	}
}

func TestWrites(t *testing.T) {
	s := start(t)
	c := newClient(t, s.Config())
	ctx := context.Background()

	obj := cm("a", "x", map[string]string{"app": "x"})
	if err := c.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, cm("a", "x", nil)); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second create: want AlreadyExists, got %v", err)
	}
	gen := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", GenerateName: "g-"}}
	if err := c.Create(ctx, gen); err != nil || len(gen.Name) != len("g-")+5 {
		t.Fatalf("generateName: %v, %q", err, gen.Name)
	}

	stale := obj.DeepCopy()
	obj.Data["k"] = "v2"
	if err := c.Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if obj.ResourceVersion == stale.ResourceVersion {
		t.Fatal("update did not change the resourceVersion")
	}
	rv := obj.ResourceVersion
	if err := c.Update(ctx, obj); err != nil || obj.ResourceVersion != rv {
		t.Fatalf("no-op update: %v, rv %s -> %s", err, rv, obj.ResourceVersion)
	}
	stale.Data["k"] = "lost"
	if err := c.Update(ctx, stale); !apierrors.IsConflict(err) {
		t.Fatalf("stale update: want Conflict, got %v", err)
	}

	base := obj.DeepCopy()
	obj.Data["m"] = "merged"
	if err := c.Patch(ctx, obj, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	if err := c.Patch(ctx, stale, client.MergeFromWithOptions(stale.DeepCopy(), client.MergeFromWithOptimisticLock{})); err == nil {
		// An empty patch with a stale resourceVersion still conflicts.
		t.Fatal("optimistic-lock patch with stale resourceVersion succeeded")
	}
	for _, p := range []client.Patch{
		client.RawPatch(types.StrategicMergePatchType, []byte(`{"data":{"s":"strategic"}}`)),
		client.RawPatch(types.JSONPatchType, []byte(`[{"op":"add","path":"/data/j","value":"json"}]`)),
	} {
		if err := c.Patch(ctx, obj, p); err != nil {
			t.Fatal(err)
		}
	}
	got := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatal(err)
	}
	if got.Data["k"] != "v2" || got.Data["m"] != "merged" || got.Data["s"] != "strategic" || got.Data["j"] != "json" {
		t.Fatalf("patches not applied: %v", got.Data)
	}

	list := &corev1.ConfigMapList{}
	if err := c.List(ctx, list, client.MatchingLabels{"app": "x"}); err != nil || len(list.Items) != 1 {
		t.Fatalf("label selector: %v, %d items", err, len(list.Items))
	}
	if err := c.List(ctx, list, client.MatchingFields{"metadata.name": "x"}); err != nil || len(list.Items) != 1 {
		t.Fatalf("field selector: %v, %d items", err, len(list.Items))
	}

	if err := c.Delete(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), got); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete: want NotFound, got %v", err)
	}
	if err := c.Delete(ctx, obj); !apierrors.IsNotFound(err) {
		t.Fatalf("second delete: want NotFound, got %v", err)
	}

	// Deleting a Namespace deletes what is in it.
	if err := c.Create(ctx, ns("a")); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, ns("a")); err != nil {
		t.Fatal(err)
	}
	if err := c.List(ctx, list, client.InNamespace("a")); err != nil || len(list.Items) != 0 {
		t.Fatalf("namespace delete left %d objects (%v)", len(list.Items), err)
	}
}

func TestWatchResume(t *testing.T) {
	s := start(t, fakeapi.WithHistory(5))
	c := newClient(t, s.Config())
	ctx := context.Background()
	if err := c.Create(ctx, cm("a", "first", nil)); err != nil {
		t.Fatal(err)
	}
	from := &corev1.ConfigMapList{}
	if err := c.List(ctx, from); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, cm("a", "second", nil)); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, &corev1.ConfigMapList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: from.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	ev := <-w.ResultChan()
	if ev.Type != watch.Added || ev.Object.(*corev1.ConfigMap).Name != "second" {
		t.Fatalf("resumed watch: got %s %v", ev.Type, ev.Object)
	}
	w.Stop()
	eventually(t, 10*time.Second, "watch closed on the server", func() bool { return s.OpenWatches() == 0 })

	// A watch-list: the current objects, then the bookmark that ends them.
	w, err = c.Watch(ctx, &corev1.ConfigMapList{}, &client.ListOptions{Raw: &metav1.ListOptions{
		SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []watch.EventType{watch.Added, watch.Added, watch.Bookmark} {
		if ev = <-w.ResultChan(); ev.Type != want {
			t.Fatalf("watch-list: got %s, want %s", ev.Type, want)
		}
	}
	if a := ev.Object.(*corev1.ConfigMap).Annotations; a[metav1.InitialEventsAnnotationKey] != "true" {
		t.Fatalf("watch-list bookmark without the initial-events-end annotation: %v", a)
	}
	w.Stop()

	// Once the history is gone, a watch from that far back gets 410.
	for i := range 12 {
		if err := c.Create(ctx, cm("a", fmt.Sprint("n", i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	w, err = c.Watch(ctx, &corev1.ConfigMapList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: from.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ev = <-w.ResultChan()
	if ev.Type != watch.Error || !apierrors.IsResourceExpired(apierrors.FromObject(ev.Object)) {
		t.Fatalf("watch from compacted rv: got %s %v", ev.Type, ev.Object)
	}
}

func TestFaults(t *testing.T) {
	s := start(t)
	cfg := s.Config()
	c := newClient(t, cfg)
	ctx := context.Background()

	s.Forbid("secrets")
	if err := c.List(ctx, &corev1.SecretList{}); !apierrors.IsForbidden(err) {
		t.Fatalf("forbidden secrets: got %v", err)
	}
	if err := c.List(ctx, &corev1.ConfigMapList{}); err != nil {
		t.Fatalf("configmaps while secrets are forbidden: %v", err)
	}
	dc := discovery.NewDiscoveryClientForConfigOrDie(cfg)
	if _, err := dc.ServerResourcesForGroupVersion("v1"); err != nil {
		t.Fatalf("discovery while secrets are forbidden: %v", err)
	}
	s.Permit("secrets")
	if err := c.List(ctx, &corev1.SecretList{}); err != nil {
		t.Fatal(err)
	}

	s.SetUnauthorized(true)
	if err := c.List(ctx, &corev1.ConfigMapList{}); !apierrors.IsUnauthorized(err) {
		t.Fatalf("unauthorized: got %v", err)
	}
	s.SetUnauthorized(false)
	bad := rest.CopyConfig(cfg)
	bad.BearerToken = "wrong"
	if err := newClient(t, bad).List(ctx, &corev1.ConfigMapList{}); !apierrors.IsUnauthorized(err) {
		t.Fatalf("wrong token: got %v", err)
	}

	s.SetLatency(50 * time.Millisecond)
	begin := time.Now()
	if err := c.List(ctx, &corev1.ConfigMapList{}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d < 50*time.Millisecond {
		t.Fatalf("latency: request took %v", d)
	}
	s.SetLatency(0)

	s.Hang(true)
	n := s.RequestCount()
	short, cancel := context.WithCancel(ctx)
	defer cancel()
	hung := make(chan error, 1)
	go func() { hung <- c.List(short, &corev1.ConfigMapList{}) }()
	eventually(t, 10*time.Second, "hung request counted", func() bool { return s.RequestCount() > n })
	select {
	case err := <-hung:
		t.Fatalf("hung request answered: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	if err := <-hung; !errors.Is(err, context.Canceled) {
		t.Fatalf("hung request: got %v, want the caller's cancellation", err)
	}
	done := make(chan error, 1)
	go func() { done <- c.List(ctx, &corev1.ConfigMapList{}) }()
	eventually(t, 10*time.Second, "request arrives", func() bool { return s.RequestCount() > n+1 })
	s.Hang(false)
	if err := <-done; err != nil {
		t.Fatalf("released request: %v", err)
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	defer leakcheck.VerifyNone(t, goleak.IgnoreCurrent())
	s := fakeapi.New()
	s.Seed(cm("a", "x", nil))
	s.Start()
	c, stop := runCluster(t, s.Config())
	if err := c.GetCache().List(context.Background(), &corev1.SecretList{}); err != nil {
		t.Fatal(err)
	}
	// A raw watch the client never stops: Close must end it.
	w, err := newClient(t, s.Config()).Watch(context.Background(), &corev1.ConfigMapList{})
	if err != nil {
		t.Fatal(err)
	}
	stop()
	// And a request that hangs.
	s.Hang(true)
	n := s.RequestCount()
	hung := make(chan error, 1)
	go func() { hung <- newClient(t, s.Config()).List(context.Background(), &corev1.ConfigMapList{}) }()
	eventually(t, 10*time.Second, "request arrives", func() bool { return s.RequestCount() > n })
	s.Close()
	for range w.ResultChan() {
	}
	if err := <-hung; err == nil {
		t.Error("hung request succeeded after Close")
	}
}

// TestStartStopCycles starts and stops clusters against one server the way
// the stress tests do, ten at a time, and checks that they let go of every
// watch and connection. Each cycle takes about 110ms however fast the
// server is: client-go polls an informer's sync every 100ms.
func TestStartStopCycles(t *testing.T) {
	defer leakcheck.VerifyNone(t, goleak.IgnoreCurrent())
	s := fakeapi.New()
	defer s.Close()
	s.Seed(ns("a"), cm("a", "x", nil))
	s.Start()
	cfg := s.Config()
	cycles, workers := 200, 10
	if testing.Short() {
		cycles = 20
	}
	begin := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < cycles; i += workers {
				c, stop, err := startCluster(cfg)
				if err == nil {
					err = errors.Join(c.GetCache().Get(context.Background(), client.ObjectKey{Namespace: "a", Name: "x"}, &corev1.ConfigMap{}), stop())
				}
				if err != nil {
					t.Errorf("cycle %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d cluster start/stop cycles, %d at a time, in %v (%d requests)", cycles, workers, time.Since(begin), s.RequestCount())
	eventually(t, 5*time.Second, "all watches closed", func() bool { return s.OpenWatches() == 0 })
}

// TestServeDiscovery: a group-version added with ServeDiscovery is listed
// and served by discovery, and gone again once taken out.
func TestServeDiscovery(t *testing.T) {
	s := start(t)
	dc := discovery.NewDiscoveryClientForConfigOrDie(s.Config())
	gv := schema.GroupVersion{Group: "widgets.mccr.test", Version: "v1"}
	if _, err := dc.ServerResourcesForGroupVersion(gv.String()); !apierrors.IsNotFound(err) {
		t.Fatalf("group-version not added: got %v, want 404", err)
	}
	s.ServeDiscovery(gv, []metav1.APIResource{{Name: "widgets", SingularName: "widget", Kind: "Widget", Namespaced: true}})
	l, err := dc.ServerResourcesForGroupVersion(gv.String())
	if err != nil || len(l.APIResources) != 1 || l.APIResources[0].Kind != "Widget" {
		t.Fatalf("added group-version: %+v, %v", l, err)
	}
	groups, err := dc.ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range groups.Groups {
		found = found || (g.Name == gv.Group && g.PreferredVersion.Version == "v1")
	}
	if !found {
		t.Errorf("group list %+v lacks %s", groups.Groups, gv)
	}
	s.ServeDiscovery(gv, nil)
	if _, err := dc.ServerResourcesForGroupVersion(gv.String()); !apierrors.IsNotFound(err) {
		t.Errorf("group-version taken out: got %v, want 404", err)
	}
}

// TestHTTP2WithOwnCertificate: with WithHTTP2 and WithCertificate a
// cluster's watch, its writes and other requests share one connection, as
// with a kube-apiserver, and the server presents the certificate given,
// which Config carries as the CA.
func TestHTTP2WithOwnCertificate(t *testing.T) {
	cert, err := fakeapi.LoopbackCertificate()
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, fakeapi.WithHTTP2(), fakeapi.WithCertificate(cert))
	s.Seed(cm("a", "one", nil))
	cfg := s.Config()
	var dials atomic.Int32
	var d net.Dialer
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, addr)
	}
	c, stop := runCluster(t, cfg)
	defer stop()
	ctx := context.Background()
	if err := c.GetClient().Create(ctx, cm("a", "two", nil)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "created ConfigMap in cache", func() bool {
		return c.GetCache().Get(ctx, client.ObjectKey{Namespace: "a", Name: "two"}, &corev1.ConfigMap{}) == nil
	})
	resp, err := c.GetHTTPClient().Get(cfg.Host + "/version")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Errorf("answered over %s, want HTTP/2", resp.Proto)
	}
	if resp.TLS == nil || !resp.TLS.PeerCertificates[0].Equal(cert.Leaf) {
		t.Error("the server did not present the certificate it was given")
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("%d connections for a watch, a write and a request, want 1", n)
	}
}
