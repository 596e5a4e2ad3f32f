package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	mcclient "github.com/mccr-dev/mccr/client"
	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/router"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// origins returns "cluster/name" for every item of a fleet-wide List, from
// the annotation, failing the test for an item without one.
func origins(t *testing.T, list crclient.ObjectList) []string {
	t.Helper()
	items, err := metaItems(list)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		cl, ok := it.GetAnnotations()[known.ClusterAnnotation]
		if !ok {
			t.Errorf("item %s has no %s annotation", it.GetName(), known.ClusterAnnotation)
		}
		out = append(out, cl+"/"+it.GetName())
	}
	return out
}

func metaItems(list crclient.ObjectList) ([]metav1.Object, error) {
	var out []metav1.Object
	switch l := list.(type) {
	case *corev1.ConfigMapList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *unstructured.UnstructuredList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *metav1.PartialObjectMetadataList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	default:
		return nil, fmt.Errorf("unexpected list %T", list)
	}
	return out, nil
}

func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// fleetItems is what TestFleetWideList puts in the fleet.
var fleetItems = []string{"c1/only-c1", "c1/same", "c2/only-c2", "c2/same", "c3/only-c3", "c3/same"}

func TestFleetWideList(t *testing.T) {
	srv := sharedServer(t)
	c := srv.GetClient()
	ns := testNamespace(t)
	bg := context.Background()
	for _, cl := range members {
		adminCreate(t, cl, configMap(ns, "only-"+cl, nil))
		adminCreate(t, cl, configMap(ns, "same", map[string]string{"cluster": cl}))
	}

	var list corev1.ConfigMapList
	test.Eventually(t, 20*time.Second, "6 items across the fleet", func() bool {
		err := c.List(bg, &list, crclient.InNamespace(ns))
		return err == nil && len(list.Items) == 6
	})
	t.Run("union, annotated, in cluster order", func(t *testing.T) {
		got := origins(t, &list)
		if !sameSet(got, fleetItems) {
			t.Errorf("fleet List = %v, want %v", got, fleetItems)
		}
		clusters := make([]string, len(got))
		for i, o := range got {
			clusters[i], _, _ = strings.Cut(o, "/")
		}
		if !slices.IsSorted(clusters) {
			t.Errorf("items not grouped by cluster in name order: %v", got)
		}
		for _, it := range list.Items {
			if it.Name == "same" && it.Data["cluster"] != it.Annotations[known.ClusterAnnotation] {
				t.Errorf("item from %s annotated %s", it.Data["cluster"], it.Annotations[known.ClusterAnnotation])
			}
		}
		if list.ResourceVersion != "" || list.Continue != "" {
			t.Errorf("fleet List kept one cluster's resourceVersion %q / continue %q", list.ResourceVersion, list.Continue)
		}
	})

	t.Run("the annotation is never written back", func(t *testing.T) {
		var fromC2 corev1.ConfigMap
		for _, it := range list.Items {
			if it.Name == "same" && it.Annotations[known.ClusterAnnotation] == "c2" {
				fromC2 = it
			}
		}
		fromC2.Data["updated"] = "yes"
		ctx := known.WithCluster(bg, fromC2.Annotations[known.ClusterAnnotation])
		if err := c.Update(ctx, &fromC2); err != nil {
			t.Fatal(err)
		}
		got := adminGet(t, "c2", ns, "same")
		if got.Data["updated"] != "yes" {
			t.Errorf("update did not land in c2: %v", got.Data)
		}
		if _, ok := got.Annotations[known.ClusterAnnotation]; ok {
			t.Errorf("c2 stored %s", known.ClusterAnnotation)
		}
		changedOnlyIn(t, ns, "same", "c2", "updated", "yes")

		// A merge patch computed from an annotated copy.
		var fromC3 corev1.ConfigMap
		for _, it := range list.Items {
			if it.Name == "same" && it.Annotations[known.ClusterAnnotation] == "c3" {
				fromC3 = it
			}
		}
		base := fromC3.DeepCopy()
		fromC3.Data["patched"] = "yes"
		if err := c.Patch(known.WithCluster(bg, "c3"), &fromC3, crclient.MergeFrom(base)); err != nil {
			t.Fatal(err)
		}
		changedOnlyIn(t, ns, "same", "c3", "patched", "yes")

		// The members' caches were not marked either.
		var cached corev1.ConfigMap
		if err := c.Get(in("c1"), crclient.ObjectKey{Namespace: ns, Name: "same"}, &cached); err != nil {
			t.Fatal(err)
		}
		if _, ok := cached.Annotations[known.ClusterAnnotation]; ok {
			t.Error("c1's cache holds the annotation")
		}
	})

	t.Run("WithClusters", func(t *testing.T) {
		var sub corev1.ConfigMapList
		if err := c.List(known.WithClusters(bg, "c3", "c1", "c3"), &sub, crclient.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		want := []string{"c1/only-c1", "c1/same", "c3/only-c3", "c3/same"}
		if got := origins(t, &sub); !sameSet(got, want) {
			t.Errorf("List over c3, c1 = %v, want %v", got, want)
		}

		err := c.List(known.WithClusters(bg, "c2", "nowhere"), &sub, crclient.InNamespace(ns))
		var le *mcclient.ListError
		if !errors.As(err, &le) {
			t.Fatalf("List over c2 and an unknown cluster = %v, want a ListError", err)
		}
		if len(le.Failed) != 1 || !errors.Is(le.Failed["nowhere"], mcclient.ErrClusterNotFound) || le.Total != 2 {
			t.Errorf("ListError = %+v", le)
		}
		if !errors.Is(err, mcclient.ErrClusterNotFound) || !strings.Contains(err.Error(), `"nowhere"`) {
			t.Errorf("ListError %q does not name the unknown cluster", err)
		}
		if got, want := origins(t, &sub), []string{"c2/only-c2", "c2/same"}; !sameSet(got, want) {
			t.Errorf("items beside the error = %v, want %v", got, want)
		}

		partial := mcclient.Partial{Failed: map[string]error{"stale": errors.New("from before")}}
		if err := c.List(known.WithClusters(bg, "c2", "nowhere"), &sub, crclient.InNamespace(ns), &partial); err != nil {
			t.Fatalf("List with Partial = %v", err)
		}
		if len(partial.Failed) != 1 || !errors.Is(partial.Failed["nowhere"], mcclient.ErrClusterNotFound) {
			t.Errorf("Partial.Failed = %v", partial.Failed)
		}
		if err := c.List(bg, &sub, crclient.InNamespace(ns), &partial); err != nil || partial.Failed != nil {
			t.Errorf("Partial was not reset: %v, %v", err, partial.Failed)
		}
	})

	t.Run("no pagination", func(t *testing.T) {
		for _, opt := range []crclient.ListOption{crclient.Limit(2), crclient.Continue("token")} {
			var l corev1.ConfigMapList
			if err := c.List(bg, &l, opt, &mcclient.Partial{}); !errors.Is(err, mcclient.ErrFleetPagination) {
				t.Errorf("fleet List with %T = %v, want ErrFleetPagination", opt, err)
			}
		}
		// One cluster pages as usual.
		var l corev1.ConfigMapList
		if err := c.List(in("c1"), &l, crclient.InNamespace(ns), crclient.Limit(1)); err != nil {
			t.Errorf("one-cluster List with Limit = %v", err)
		}
	})

	t.Run("unstructured", func(t *testing.T) {
		// Unstructured reads bypass the members' caches by default: this
		// List reaches every API server.
		var u unstructured.UnstructuredList
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMapList")
		if err := c.List(bg, &u, crclient.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if got := origins(t, &u); !sameSet(got, fleetItems) {
			t.Errorf("unstructured fleet List = %v", got)
		}
		if u.GetKind() != "ConfigMapList" {
			t.Errorf("kind = %q", u.GetKind())
		}
	})

	t.Run("ListOptions with Raw", func(t *testing.T) {
		// controller-runtime writes the selectors of a List that reaches
		// the API server into the Raw of the ListOptions given: the
		// clusters are listed concurrently, and must not share it (the race
		// detector tells); the caller's options are left as they were.
		var u unstructured.UnstructuredList
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMapList")
		sel, err := labels.Parse("!mccr-test-absent")
		if err != nil {
			t.Fatal(err)
		}
		raw := &metav1.ListOptions{}
		opts := &crclient.ListOptions{Namespace: ns, LabelSelector: sel, Raw: raw}
		if err := c.List(bg, &u, opts); err != nil {
			t.Fatal(err)
		}
		if got := origins(t, &u); !sameSet(got, fleetItems) {
			t.Errorf("fleet List with Raw = %v", got)
		}
		if opts.Raw != raw || *raw != (metav1.ListOptions{}) {
			t.Errorf("the caller's ListOptions were changed: Raw %p (%+v), was %p", opts.Raw, *opts.Raw, raw)
		}
	})

	t.Run("metadata only", func(t *testing.T) {
		var m metav1.PartialObjectMetadataList
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
		test.Eventually(t, 20*time.Second, "metadata informers synced", func() bool {
			return c.List(bg, &m, crclient.InNamespace(ns)) == nil && len(m.Items) == 6
		})
		if got := origins(t, &m); !sameSet(got, fleetItems) {
			t.Errorf("metadata fleet List = %v", got)
		}
	})

	t.Run("UnsafeDisableDeepCopy leaves the caches alone", func(t *testing.T) {
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				var l corev1.ConfigMapList
				if err := c.List(bg, &l, crclient.InNamespace(ns), crclient.UnsafeDisableDeepCopy); err != nil {
					t.Error(err)
					return
				}
				if got := origins(t, &l); !sameSet(got, fleetItems) {
					t.Errorf("fleet List = %v", got)
				}
			})
		}
		wg.Wait()
		var one corev1.ConfigMapList
		if err := c.List(in("c1"), &one, crclient.InNamespace(ns), crclient.UnsafeDisableDeepCopy); err != nil {
			t.Fatal(err)
		}
		for _, it := range one.Items {
			if _, ok := it.Annotations[known.ClusterAnnotation]; ok {
				t.Errorf("c1's cached %s carries the annotation", it.Name)
			}
		}
	})
}

// TestFleetListLeavesUnsafeCacheUnmarked: with a cache that hands out its
// objects without copying them (cache-wide, or for one kind), a fleet-wide
// List marks copies: a one-cluster Get or List afterwards, which reads the
// same cached objects, sees no known.ClusterAnnotation; typed, unstructured
// and metadata-only.
func TestFleetListLeavesUnsafeCacheUnmarked(t *testing.T) {
	ns := testNamespace(t)
	cm := configMap(ns, "cm", map[string]string{"a": "1"})
	cm.Annotations = map[string]string{"theirs": "x"}
	adminCreate(t, "c1", cm)
	key := crclient.ObjectKey{Namespace: ns, Name: "cm"}
	gvk := corev1.SchemeGroupVersion.WithKind("ConfigMap")

	typed := func() (crclient.Object, crclient.ObjectList) { return &corev1.ConfigMap{}, &corev1.ConfigMapList{} }
	unstructuredCM := func() (crclient.Object, crclient.ObjectList) {
		obj, list := &unstructured.Unstructured{}, &unstructured.UnstructuredList{}
		obj.SetGroupVersionKind(gvk)
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind("ConfigMapList"))
		return obj, list
	}
	metadataCM := func() (crclient.Object, crclient.ObjectList) {
		obj, list := &metav1.PartialObjectMetadata{}, &metav1.PartialObjectMetadataList{}
		obj.SetGroupVersionKind(gvk)
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind("ConfigMapList"))
		return obj, list
	}
	cacheWide := func(o *ctrl.Options) { o.Cache.DefaultUnsafeDisableDeepCopy = ptr.To(true) }
	for _, tc := range []struct {
		name   string
		config func(o *ctrl.Options)
		shape  func() (crclient.Object, crclient.ObjectList)
	}{
		{"cache-wide/typed", cacheWide, typed},
		{"ByObject/typed", func(o *ctrl.Options) {
			o.Cache.ByObject = map[crclient.Object]cache.ByObject{&corev1.ConfigMap{}: {UnsafeDisableDeepCopy: ptr.To(true)}}
		}, typed},
		{"cache-wide/unstructured", func(o *ctrl.Options) {
			cacheWide(o)
			o.Client.Cache = &crclient.CacheOptions{Unstructured: true}
		}, unstructuredCM},
		{"cache-wide/metadata", cacheWide, metadataCM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := serverOptions(testr.NewWithInterface(t, testr.Options{Verbosity: 0}), ns)
			tc.config(&o)
			srv := startServerWith(t, o, named("c1", "c1"))
			waitReady(t, srv, "c1")
			c := srv.GetClient()
			unmarked := func(when string) {
				t.Helper()
				obj, list := tc.shape()
				if err := c.Get(in("c1"), key, obj); err != nil {
					t.Fatal(err)
				}
				if v, ok := obj.GetAnnotations()[known.ClusterAnnotation]; ok || obj.GetAnnotations()["theirs"] != "x" {
					t.Errorf("%s: one-cluster Get = %v, want the cached annotations (%s=%q)", when, obj.GetAnnotations(), known.ClusterAnnotation, v)
				}
				if err := c.List(in("c1"), list, crclient.InNamespace(ns)); err != nil {
					t.Fatal(err)
				}
				items, err := metaItems(list)
				if err != nil || len(items) != 1 {
					t.Fatalf("one-cluster List = %d items, %v", len(items), err)
				}
				if v, ok := items[0].GetAnnotations()[known.ClusterAnnotation]; ok {
					t.Errorf("%s: one-cluster List returns %s=%q", when, known.ClusterAnnotation, v)
				}
			}
			_, list := tc.shape()
			listedFrom(t, c, "c1", ns, list, 1)
			unmarked("after a fleet-wide List")
			// Once more: a second fleet-wide List starts from the cache's
			// objects as the first found them.
			_, list = tc.shape()
			listedFrom(t, c, "c1", ns, list, 1)
			unmarked("after a second fleet-wide List")
		})
	}
}

// unreachable names a cluster whose API server address refuses connections.
func unreachable(t testing.TB, name string) *config.NamedConfig {
	t.Helper()
	nc, err := test.Unreachable(name)
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

func TestFleetWideListWithAMemberNotReady(t *testing.T) {
	ns := testNamespace(t)
	srv := startServer(t, ns, named("c1", "c1"), named("c2", "c2"), unreachable(t, "ghost"))
	waitReady(t, srv, "c1", "c2")
	c := srv.GetClient()
	bg := context.Background()
	for _, cl := range []string{"c1", "c2"} {
		adminCreate(t, cl, configMap(ns, "x", nil))
	}
	ready := []string{"c1/x", "c2/x"}

	for name, call := range singleClusterCalls(c, ns) {
		if err := call(in("ghost")); !errors.Is(err, mcclient.ErrClusterNotReady) || !strings.Contains(err.Error(), `"ghost"`) {
			t.Errorf("%s in a cluster not Ready = %v, want ErrClusterNotReady naming it", name, err)
		}
	}

	var list corev1.ConfigMapList
	var err error
	test.Eventually(t, 20*time.Second, "items of c1 and c2", func() bool {
		err = c.List(bg, &list, crclient.InNamespace(ns))
		return len(list.Items) == 2
	})
	var le *mcclient.ListError
	if !errors.As(err, &le) {
		t.Fatalf("fleet List with a member not Ready = %v, want a ListError", err)
	}
	if len(le.Failed) != 1 || !errors.Is(le.Failed["ghost"], mcclient.ErrClusterNotReady) || le.Total != 3 {
		t.Errorf("ListError = %+v", le)
	}
	if !strings.Contains(err.Error(), `"ghost"`) || !strings.Contains(err.Error(), "1 of 3") {
		t.Errorf("error %q", err)
	}
	if got := origins(t, &list); !sameSet(got, ready) {
		t.Errorf("items beside the error = %v, want %v", got, ready)
	}

	var partial mcclient.Partial
	if err := c.List(bg, &list, crclient.InNamespace(ns), &partial); err != nil {
		t.Fatalf("List with Partial = %v", err)
	}
	if len(partial.Failed) != 1 || !errors.Is(partial.Failed["ghost"], mcclient.ErrClusterNotReady) {
		t.Errorf("Partial.Failed = %v", partial.Failed)
	}
	if got := origins(t, &list); !sameSet(got, ready) {
		t.Errorf("partial items = %v, want %v", got, ready)
	}

	// Leaving it out, or deleting it, makes the List whole again.
	if err := c.List(known.WithClusters(bg, "c1", "c2"), &list, crclient.InNamespace(ns)); err != nil {
		t.Errorf("List over the Ready ones = %v", err)
	}
	if err := srv.Delete("ghost"); err != nil {
		t.Fatal(err)
	}
	if err := c.List(bg, &list, crclient.InNamespace(ns)); err != nil || !sameSet(origins(t, &list), ready) {
		t.Errorf("List after deleting ghost = %v, %v", origins(t, &list), err)
	}
}

// reachability reports, for every request a member makes, whether its API
// server answered: a transport error (not caused by the request's own
// cancellation) means unreachable, any response means reachable. It is what
// a Server can feed router.Table.SetUnreachable with.
type reachability struct {
	next   http.RoundTripper
	report func(error)
}

func (r reachability) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	switch {
	case err == nil:
		r.report(nil)
	case req.Context().Err() == nil:
		r.report(err)
	}
	return resp, err
}

func TestFleetWideListWithAnAPIServerDown(t *testing.T) {
	ns := testNamespace(t)
	// The Server's members report their reachability to a routing table
	// of the test's own, holding the same member clients.
	table := &router.Table{}
	var reports atomic.Int64
	withReports := func(name string) *config.NamedConfig {
		cfg := rest.CopyConfig(fleet.Cluster(name).Config)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return reachability{next: rt, report: func(err error) {
				if err != nil {
					reports.Add(1)
				}
				table.SetUnreachable(name, err)
			}}
		})
		return config.NewNamedConfig(name, cfg)
	}
	srv := startServer(t, ns, withReports("c1"), withReports("c2"), withReports("c3"))
	waitReady(t, srv, members...)
	for _, n := range members {
		mgr, err := srv.GetManager(n)
		if err != nil {
			t.Fatal(err)
		}
		table.Set(n, mgr.GetClient(), true)
		adminCreate(t, n, configMap(ns, "x", nil))
	}
	c := mcclient.New(table, mcclient.Options{Scheme: srv.GetScheme(), RESTMapper: srv.GetHostManager().GetRESTMapper()})
	bg := context.Background()
	all := []string{"c1/x", "c2/x", "c3/x"}
	var list corev1.ConfigMapList
	test.Eventually(t, 20*time.Second, "every item", func() bool {
		return c.List(bg, &list, crclient.InNamespace(ns)) == nil && len(list.Items) == 3
	})

	down := fleet.Cluster("c3")
	if err := down.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	restart := func() {
		if !restarted {
			restarted = true
			ctx, cancel := context.WithTimeout(bg, 60*time.Second)
			defer cancel()
			if err := down.StartAPIServer(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(restart)

	// By default: the documented error, naming c3, beside the others' items.
	var err error
	test.Eventually(t, 30*time.Second, "c3 reported unreachable", func() bool {
		err = c.List(bg, &list, crclient.InNamespace(ns))
		return err != nil
	})
	var le *mcclient.ListError
	if !errors.As(err, &le) || len(le.Failed) != 1 || !errors.Is(le.Failed["c3"], mcclient.ErrClusterUnreachable) {
		t.Fatalf("fleet List with c3 down = %v, want a ListError naming c3 as unreachable", err)
	}
	if got := origins(t, &list); !sameSet(got, all[:2]) {
		t.Errorf("items = %v, want c1's and c2's", got)
	}
	// With Partial: no error, c3 in Failed.
	var partial mcclient.Partial
	if err := c.List(bg, &list, crclient.InNamespace(ns), &partial); err != nil {
		t.Fatalf("List with Partial = %v", err)
	}
	if len(partial.Failed) != 1 || !errors.Is(partial.Failed["c3"], mcclient.ErrClusterUnreachable) {
		t.Errorf("Partial.Failed = %v", partial.Failed)
	}
	if got := origins(t, &list); !sameSet(got, all[:2]) {
		t.Errorf("partial items = %v", got)
	}
	// Calls for c3 alone behave as a single-cluster Manager's would: reads
	// come from its cache, writes reach for the API server and fail.
	var cm corev1.ConfigMap
	if err := c.Get(in("c3"), crclient.ObjectKey{Namespace: ns, Name: "x"}, &cm); err != nil {
		t.Errorf("cached Get in c3 while down = %v", err)
	}
	wctx, cancel := context.WithTimeout(in("c3"), 30*time.Second)
	defer cancel()
	start := time.Now()
	err = srv.GetClient().Create(wctx, configMap(ns, "y", nil))
	if err == nil || errors.Is(err, mcclient.ErrClusterNotReady) || time.Since(start) > 20*time.Second {
		t.Errorf("Create in c3 while down = %v after %s, want the API server's error, fast", err, time.Since(start))
	}

	// The Server's own fan-out client: once the member has noticed its API
	// server is gone (its next request fails), fleet-wide Lists report it
	// as unreachable instead of serving its stale cache, and the Server
	// shows it as Unreachable.
	test.Eventually(t, 30*time.Second, "the Server reports c3 unreachable", func() bool {
		lctx, lcancel := context.WithTimeout(bg, 10*time.Second)
		defer lcancel()
		err := srv.GetClient().List(lctx, &list, crclient.InNamespace(ns))
		return errors.As(err, &le) && len(le.Failed) == 1 && errors.Is(le.Failed["c3"], mcclient.ErrClusterUnreachable)
	})
	var srvPartial mcclient.Partial
	if err := srv.GetClient().List(bg, &list, crclient.InNamespace(ns), &srvPartial); err != nil || len(srvPartial.Failed) != 1 || len(list.Items) != 2 {
		t.Errorf("Server's partial List with c3 down = %v, failed %v, %d items", err, srvPartial.Failed, len(list.Items))
	}
	// The member's phase follows from its own report of the failed
	// request, which may come a moment after the List saw it.
	test.Eventually(t, 10*time.Second, "the Server shows c3 Unreachable while its API server is down", func() bool {
		st, _ := srv.Status("c3")
		return st.Phase == server.PhaseUnreachable
	})

	// Back up: whole again.
	restart()
	test.Eventually(t, 60*time.Second, "c3 reachable again", func() bool {
		return c.List(bg, &list, crclient.InNamespace(ns)) == nil && len(list.Items) == 3
	})
	if reports.Load() == 0 {
		t.Error("no unreachable report")
	}
}

func TestClusterDeletedDuringList(t *testing.T) {
	ns := testNamespace(t)
	// Two names churn (deleted and added again); each has its own Manager
	// against c3's API server.
	churn := []string{"d1", "d2"}
	srv := startServer(t, ns, named("c1", "c1"), named("c2", "c2"), named("d1", "c3"), named("d2", "c3"))
	waitReady(t, srv, "c1", "c2", "d1", "d2")
	for _, cl := range members {
		adminCreate(t, cl, configMap(ns, "x", nil))
	}
	c := srv.GetClient()

	var stop atomic.Bool
	var lists, failures atomic.Int64
	var longest atomic.Int64
	var wg sync.WaitGroup
	// Each round lists a kind whose informer a re-added member has yet to
	// start, so Lists also wait on caches being synced when the cluster
	// goes away.
	kinds := []func() crclient.ObjectList{
		func() crclient.ObjectList { return &corev1.ConfigMapList{} },
		func() crclient.ObjectList { return &corev1.SecretList{} },
		func() crclient.ObjectList { return &corev1.ServiceAccountList{} },
		func() crclient.ObjectList { return &corev1.ServiceList{} },
	}
	for w := range 3 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				start := time.Now()
				var partial mcclient.Partial
				opts := []crclient.ListOption{crclient.InNamespace(ns)}
				if i%2 == 0 {
					opts = append(opts, &partial)
				}
				err := c.List(ctx, kinds[(i+w)%len(kinds)](), opts...)
				cancel()
				d := time.Since(start)
				for {
					old := longest.Load()
					if int64(d) <= old || longest.CompareAndSwap(old, int64(d)) {
						break
					}
				}
				lists.Add(1)
				failed := partial.Failed
				if le, ok := errors.AsType[*mcclient.ListError](err); ok {
					failed = le.Failed
				} else if err != nil {
					t.Errorf("List = %v", err)
					continue
				}
				for n, ferr := range failed {
					failures.Add(1)
					// Only a re-added member still starting may fail.
					if !slices.Contains(churn, n) || !errors.Is(ferr, mcclient.ErrClusterNotReady) {
						t.Errorf("List failed in %s: %v", n, ferr)
					}
				}
			}
		})
	}
	for round := range 4 {
		for _, n := range churn {
			before := lists.Load()
			if err := srv.Delete(n); err != nil {
				t.Fatal(err)
			}
			if err := srv.Add(named(n, "c3")); err != nil {
				t.Fatal(err)
			}
			if err := waitReadyErr(srv, 60*time.Second, n); err != nil {
				t.Error(err)
			}
			// Let some Lists run against the new Manager.
			test.Eventually(t, 30*time.Second, fmt.Sprintf("lists in round %d", round), func() bool { return lists.Load() > before+3 })
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d fleet Lists, %d cluster failures, longest %s", lists.Load(), failures.Load(), time.Duration(longest.Load()))
	if d := time.Duration(longest.Load()); d > 30*time.Second {
		t.Errorf("a List took %s", d)
	}
	// Everything Ready again: the List is whole.
	var list corev1.ConfigMapList
	test.Eventually(t, 20*time.Second, "whole again", func() bool {
		return c.List(context.Background(), &list, crclient.InNamespace(ns)) == nil && len(list.Items) == 4
	})
	want := []string{"c1/x", "c2/x", "d1/x", "d2/x"}
	if got := origins(t, &list); !sameSet(got, want) {
		t.Errorf("items = %v, want %v", got, want)
	}
}
