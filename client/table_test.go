package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes/scheme"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	mcclient "github.com/mccr-dev/mccr/client"
	"github.com/mccr-dev/mccr/internal/router"
	"github.com/mccr-dev/mccr/known"
)

// These tests need no API server: they check the routing table the Server
// keeps, and the fan-out client over it.

func TestRoutingTable(t *testing.T) {
	var table router.Table
	a1, a2 := fake.NewFakeClient(), fake.NewFakeClient()
	member := func(name string) mcclient.Member {
		t.Helper()
		ms := table.Members()
		i := slices.IndexFunc(ms, func(m mcclient.Member) bool { return m.Name == name })
		if i < 0 {
			t.Fatalf("%s not among %v", name, ms)
		}
		return ms[i]
	}

	if _, err := table.Cluster("a"); !errors.Is(err, mcclient.ErrClusterNotFound) {
		t.Errorf("empty table: %v", err)
	}
	table.Set("b", nil, true)
	table.Set("a", nil, true)
	if m := member("a"); !errors.Is(m.Err, mcclient.ErrClusterNotReady) || m.Client != nil || m.Context != nil {
		t.Errorf("not Ready member = %+v", m)
	}
	if _, err := table.Cluster("a"); !errors.Is(err, mcclient.ErrClusterNotReady) {
		t.Errorf("Cluster(not Ready) = %v", err)
	}
	if got := table.Names(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Names = %v", got)
	}

	table.Set("a", a1, true)
	first := member("a")
	if first.Err != nil || first.Client != a1 || first.Context == nil || first.Context.Err() != nil {
		t.Errorf("Ready member = %+v", first)
	}
	if got := table.ReadyClusters(); len(got) != 1 || got[0].Name != "a" {
		t.Errorf("ReadyClusters = %v", got)
	}

	// Unreachable: fleet-wide Lists skip it, single calls still route.
	cause := errors.New("dial tcp: connection refused")
	table.SetUnreachable("a", cause)
	table.SetUnreachable("a", errors.New("a later error"))
	if m := member("a"); !errors.Is(m.Err, mcclient.ErrClusterUnreachable) || !errors.Is(m.Err, cause) {
		t.Errorf("unreachable member = %+v", m)
	}
	if c, err := table.Cluster("a"); err != nil || c != a1 {
		t.Errorf("Cluster(unreachable) = %v, %v", c, err)
	}
	table.Set("a", a1, true) // the same client: still unreachable
	if m := member("a"); m.Err == nil || m.Context != first.Context {
		t.Errorf("re-Set of the same client changed the member: %+v", m)
	}
	table.SetUnreachable("a", nil)
	if m := member("a"); m.Err != nil {
		t.Errorf("reachable again = %+v", m)
	}
	table.SetUnreachable("b", cause) // not Ready: ignored
	table.SetUnreachable("zz", cause)
	if m := member("b"); !errors.Is(m.Err, mcclient.ErrClusterNotReady) {
		t.Errorf("b = %+v", m)
	}

	// A new client is a new route: the old one's context ends, marks go.
	table.SetUnreachable("a", cause)
	table.Set("a", a2, true)
	if first.Context.Err() == nil {
		t.Error("replaced route's context still alive")
	}
	second := member("a")
	if second.Err != nil || second.Client != a2 {
		t.Errorf("after a new client: %+v", second)
	}
	table.Set("a", nil, true)
	if second.Context.Err() == nil {
		t.Error("route's context alive after the cluster stopped being Ready")
	}
	table.Set("a", a1, true)
	third := member("a")
	table.Remove("a")
	if third.Context.Err() == nil {
		t.Error("route's context alive after Remove")
	}
	if _, err := table.Cluster("a"); !errors.Is(err, mcclient.ErrClusterNotFound) {
		t.Errorf("after Remove: %v", err)
	}
}

// nopClient answers Get with nothing, so that a benchmark or allocation
// count measures the routing alone.
type nopClient struct{ crclient.Client }

func (nopClient) Get(context.Context, crclient.ObjectKey, crclient.Object, ...crclient.GetOption) error {
	return nil
}

func TestRoutingAllocatesNothing(t *testing.T) {
	var table router.Table
	for i := range 50 {
		table.Set(fmt.Sprintf("m%02d", i), nopClient{}, true)
	}
	c := mcclient.New(&table, mcclient.Options{Scheme: scheme.Scheme})
	ctx := known.WithCluster(context.Background(), "m17")
	key := crclient.ObjectKey{Namespace: "ns", Name: "n"}
	var cm corev1.ConfigMap
	if n := testing.AllocsPerRun(1000, func() {
		if err := c.Get(ctx, key, &cm); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("a routed Get allocates %v times", n)
	}
}

// BenchmarkRoute is the fan-out client's own cost per call: a Get routed
// to a member whose Get does nothing.
func BenchmarkRoute(b *testing.B) {
	var table router.Table
	for i := range 50 {
		table.Set(fmt.Sprintf("m%02d", i), nopClient{}, true)
	}
	c := mcclient.New(&table, mcclient.Options{Scheme: scheme.Scheme})
	ctx := known.WithCluster(context.Background(), "m17")
	key := crclient.ObjectKey{Namespace: "ns", Name: "n"}
	var cm corev1.ConfigMap
	b.ReportAllocs()
	for b.Loop() {
		_ = c.Get(ctx, key, &cm)
	}
}

// Calls and fleet-wide Lists race with clusters being added, made Ready,
// marked unreachable and removed; run with -race.
func TestRoutingWhileTheTableChanges(t *testing.T) {
	var table router.Table
	names := []string{"a", "b", "c", "d"}
	clients := map[string]crclient.Client{}
	for _, n := range names {
		cm := configMap("ns", "x", map[string]string{"cluster": n})
		clients[n] = fake.NewClientBuilder().WithObjects(cm).Build()
		table.Set(n, clients[n], true)
	}
	c := mcclient.New(&table, mcclient.Options{Scheme: scheme.Scheme})
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				n := names[(i+w)%len(names)]
				var cm corev1.ConfigMap
				err := c.Get(known.WithCluster(context.Background(), n), crclient.ObjectKey{Namespace: "ns", Name: "x"}, &cm)
				switch {
				case err == nil:
					if cm.Data["cluster"] != n {
						t.Errorf("Get in %s read %s's object", n, cm.Data["cluster"])
					}
				case !errors.Is(err, mcclient.ErrClusterNotFound) && !errors.Is(err, mcclient.ErrClusterNotReady) && !apierrors.IsNotFound(err):
					t.Errorf("Get in %s = %v", n, err)
				}
				var list corev1.ConfigMapList
				var partial mcclient.Partial
				if err := c.List(context.Background(), &list, &partial); err != nil {
					t.Errorf("List = %v", err)
				}
				for _, it := range list.Items {
					if it.Data["cluster"] != it.Annotations[known.ClusterAnnotation] {
						t.Errorf("item of %s annotated %s", it.Data["cluster"], it.Annotations[known.ClusterAnnotation])
					}
				}
			}
		})
	}
	for i := range 2000 {
		n := names[i%len(names)]
		switch i % 5 {
		case 0:
			table.Remove(n)
		case 1:
			table.Set(n, nil, true)
		case 2, 4:
			table.Set(n, clients[n], true)
		case 3:
			table.SetUnreachable(n, errors.New("down"))
		}
	}
	stop.Store(true)
	wg.Wait()
}

// TestFleetListNamingAClusterElsewhere: with sharding, a fleet-wide List
// over known.WithClusters naming a cluster another replica runs reports it
// as a call aimed at it does, with an *ElsewhereError naming the owner, not
// as a cluster the fleet does not know.
func TestFleetListNamingAClusterElsewhere(t *testing.T) {
	var table router.Table
	table.Set("east", fake.NewClientBuilder().WithObjects(configMap("ns", "x", nil)).Build(), true)
	table.SetElsewhere("west", "replica-2")
	c := mcclient.New(&table, mcclient.Options{Scheme: scheme.Scheme})
	ctx := known.WithClusters(context.Background(), "east", "west", "nowhere")

	var list corev1.ConfigMapList
	err := c.List(ctx, &list)
	if !errors.Is(err, mcclient.ErrClusterElsewhere) || len(list.Items) != 1 {
		t.Errorf("List over east, west = %v, %d items; want ErrClusterElsewhere beside east's item", err, len(list.Items))
	}
	var partial mcclient.Partial
	if err := c.List(ctx, &list, &partial); err != nil {
		t.Fatalf("List with Partial = %v", err)
	}
	west := partial.Failed["west"]
	var ee *mcclient.ElsewhereError
	if !errors.As(west, &ee) || ee.Owner != "replica-2" || errors.Is(west, mcclient.ErrClusterNotFound) {
		t.Errorf("west failed with %v, want an *ElsewhereError naming replica-2", west)
	}
	if nowhere := partial.Failed["nowhere"]; !errors.Is(nowhere, mcclient.ErrClusterNotFound) {
		t.Errorf("an unknown name failed with %v, want ErrClusterNotFound", nowhere)
	}
	if _, ok := partial.Failed["east"]; ok || len(partial.Failed) != 2 {
		t.Errorf("Partial.Failed = %v", partial.Failed)
	}
}

// hanging returns a member client whose Get and List wait for their ctx,
// as a cache waiting for an API server that does not answer does; entered
// receives a value as each starts waiting.
func hanging(entered chan<- string) crclient.Client {
	return fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, _ crclient.WithWatch, _ crclient.ObjectKey, _ crclient.Object, _ ...crclient.GetOption) error {
			entered <- "Get"
			<-ctx.Done()
			return ctx.Err()
		},
		List: func(ctx context.Context, _ crclient.WithWatch, _ crclient.ObjectList, _ ...crclient.ListOption) error {
			entered <- "List"
			<-ctx.Done()
			return ctx.Err()
		},
	}).Build()
}

// TestFleetListWaitingOnAClusterMarkedUnreachable: a fleet-wide List
// already waiting on a member stops waiting when the member is marked
// unreachable and reports it as a List started then does; a call aimed at
// the member alone keeps waiting, on its own ctx.
func TestFleetListWaitingOnAClusterMarkedUnreachable(t *testing.T) {
	var table router.Table
	entered := make(chan string, 2)
	table.Set("down", hanging(entered), true)
	table.Set("up", fake.NewClientBuilder().WithObjects(configMap("ns", "x", nil)).Build(), true)
	c := mcclient.New(&table, mcclient.Options{Scheme: scheme.Scheme})

	getCtx, cancelGet := context.WithCancel(in("down"))
	defer cancelGet()
	got := make(chan error, 1)
	go func() {
		var cm corev1.ConfigMap
		got <- c.Get(getCtx, crclient.ObjectKey{Namespace: "ns", Name: "x"}, &cm)
	}()
	var partial mcclient.Partial
	var list corev1.ConfigMapList
	listed := make(chan error, 1)
	go func() { listed <- c.List(context.Background(), &list, &partial) }()
	for range 2 {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the calls did not reach the member")
		}
	}

	cause := errors.New("dial tcp: i/o timeout")
	table.SetUnreachable("down", cause)
	select {
	case err := <-listed:
		if err != nil {
			t.Fatalf("List with Partial = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the fleet-wide List still waits on a member marked unreachable")
	}
	if f := partial.Failed["down"]; !errors.Is(f, mcclient.ErrClusterUnreachable) || !errors.Is(f, cause) || len(partial.Failed) != 1 {
		t.Errorf("Partial.Failed = %v, want down unreachable", partial.Failed)
	}
	if len(list.Items) != 1 || list.Items[0].Annotations[known.ClusterAnnotation] != "up" {
		t.Errorf("items = %v, want up's", list.Items)
	}
	select {
	case err := <-got:
		t.Errorf("a Get aimed at the member ended when it was marked unreachable: %v", err)
	default:
	}
	cancelGet()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Errorf("Get whose ctx was canceled = %v", err)
	}

	// Reachable again: a List waits on it again, until its route ends.
	table.SetUnreachable("down", nil)
	go func() { listed <- c.List(context.Background(), &list, &partial) }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the List did not reach the member")
	}
	table.Set("down", nil, false)
	select {
	case err := <-listed:
		if err != nil || !errors.Is(partial.Failed["down"], mcclient.ErrClusterNotReady) {
			t.Errorf("List = %v, failed %v; want down not ready", err, partial.Failed)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the fleet-wide List still waits on a member whose route ended")
	}
}

// TestFleetListOverNamedClustersReportsOneDeletedMeanwhile: a fleet-wide
// List over clusters named with known.WithClusters reports one deleted
// while the List waits on it as a List started after the Delete does, with
// ErrClusterNotFound, instead of leaving it out as if it had no items; a
// List over the whole fleet leaves it out.
func TestFleetListOverNamedClustersReportsOneDeletedMeanwhile(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		reported bool
	}{
		{"named", known.WithClusters(context.Background(), "gone", "up"), true},
		{"whole fleet", context.Background(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var table router.Table
			entered := make(chan string, 1)
			table.Set("gone", hanging(entered), true)
			table.Set("up", fake.NewClientBuilder().WithObjects(configMap("ns", "x", nil)).Build(), true)
			c := mcclient.New(&table, mcclient.Options{Scheme: scheme.Scheme})

			var partial mcclient.Partial
			var list corev1.ConfigMapList
			listed := make(chan error, 1)
			go func() { listed <- c.List(tc.ctx, &list, &partial) }()
			select {
			case <-entered:
			case <-time.After(10 * time.Second):
				t.Fatal("the List did not reach the member")
			}
			table.Remove("gone")
			select {
			case err := <-listed:
				if err != nil {
					t.Fatalf("List with Partial = %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the fleet-wide List still waits on a deleted member")
			}
			if len(list.Items) != 1 || list.Items[0].Annotations[known.ClusterAnnotation] != "up" {
				t.Errorf("items = %v, want up's", list.Items)
			}
			gone, failed := partial.Failed["gone"]
			switch {
			case tc.reported && (!errors.Is(gone, mcclient.ErrClusterNotFound) || len(partial.Failed) != 1):
				t.Errorf("Partial.Failed = %v, want gone not found", partial.Failed)
			case !tc.reported && failed:
				t.Errorf("Partial.Failed = %v, want none", partial.Failed)
			}
		})
	}
}

// TestFleetListPanicReachesTheCaller: a member's List that panics during a
// fleet-wide List makes the List panic on the caller's goroutine, once
// every cluster's List has returned, as a List of one cluster does (and
// controller-runtime recovers a reconciler's panic), instead of ending the
// process from a goroutine of the List.
func TestFleetListPanicReachesTheCaller(t *testing.T) {
	var table router.Table
	boom := errors.New("boom")
	var returned atomic.Int64
	panicking := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, crclient.WithWatch, crclient.ObjectList, ...crclient.ListOption) error {
			defer returned.Add(1)
			panic(boom)
		},
	}).Build()
	names := []string{"a", "b", "c", "d"}
	for _, n := range names {
		table.Set(n, panicking, true)
	}
	c := mcclient.New(&table, mcclient.Options{Scheme: scheme.Scheme})
	var got any
	func() {
		defer func() { got = recover() }()
		var list corev1.ConfigMapList
		err := c.List(context.Background(), &list)
		t.Errorf("List returned %v instead of panicking", err)
	}()
	err, ok := got.(error)
	if !ok || !errors.Is(err, boom) || !strings.Contains(err.Error(), "panicked: boom") {
		t.Errorf("List panicked with %v, want the member's panic", got)
	}
	if n := returned.Load(); n != int64(len(names)) {
		t.Errorf("List panicked with %d of %d clusters' Lists returned", n, len(names))
	}
}
