package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// The benchmarks' Server has 20 members, b00…b19, spread over the fleet's
// three API servers: each name has its own Manager and caches, as 20 real
// clusters would. Their caches hold these namespaces, each with as many
// ConfigMaps in every API server as its name says. Those of
// benchAnnotated carry annotations, as most objects do (a controller's,
// kubectl's).
const benchMembers = 20

var benchNamespaces = map[string]int{"bench-get": 1, "bench-10": 10, "bench-40": 40, "bench-200": 200, benchAnnotated: 10}

const benchAnnotated = "bench-annotated"

var bench struct {
	once  sync.Once
	srv   *server.Server
	names []string
	err   error
}

func benchServer(b *testing.B) (*server.Server, []string) {
	b.Helper()
	bench.once.Do(func() { bench.srv, bench.names, bench.err = startBenchServer(b) })
	if bench.err != nil {
		b.Fatal(bench.err)
	}
	return bench.srv, bench.names
}

func startBenchServer(b *testing.B) (*server.Server, []string, error) {
	ctx := context.Background()
	var namespaces []string
	for ns, n := range benchNamespaces {
		namespaces = append(namespaces, ns)
		for _, cl := range members {
			a := admin(b, cl)
			if err := a.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
				return nil, nil, err
			}
			for i := range n {
				cm := configMap(ns, fmt.Sprintf("obj-%03d", i), map[string]string{"index": fmt.Sprint(i), "cluster": cl})
				cm.Labels = map[string]string{"app": "bench", "tier": "data"}
				if ns == benchAnnotated {
					cm.Annotations = map[string]string{
						"app.kubernetes.io/managed-by":                     "bench",
						"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","kind":"ConfigMap"}`,
					}
				}
				if err := a.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
					return nil, nil, err
				}
			}
		}
	}
	srv, err := server.NewServer(fleet.Cluster("host").Config, serverOptions(logr.Discard(), namespaces...))
	if err != nil {
		return nil, nil, err
	}
	names := make([]string, benchMembers)
	for i := range names {
		names[i] = fmt.Sprintf("b%02d", i)
		if err := srv.Add(named(names[i], members[i%len(members)])); err != nil {
			return nil, nil, err
		}
	}
	stop := test.Background(srv)
	test.AtExit(stop)
	if err := waitReadyErr(srv, 3*time.Minute, names...); err != nil {
		return nil, nil, err
	}
	// Start every member's ConfigMap informers and wait until they hold
	// everything.
	want := 0
	for _, n := range benchNamespaces {
		want += n * benchMembers
	}
	deadline := time.Now().Add(time.Minute)
	for {
		got := 0
		for ns := range benchNamespaces {
			var list corev1.ConfigMapList
			if err := srv.GetClient().List(ctx, &list, crclient.InNamespace(ns)); err == nil {
				got += len(list.Items)
			}
		}
		if got == want {
			return srv, names, nil
		}
		if time.Now().After(deadline) {
			return nil, nil, errors.New("benchmark caches did not fill")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// BenchmarkGet compares a cached Get through the fan-out client with the
// same Get on the member's own (cached) client, with the same ctx — the
// one a Reconcile gets, which names its cluster.
func BenchmarkGet(b *testing.B) {
	srv, _ := benchServer(b)
	mgr, err := srv.GetManager("b00")
	if err != nil {
		b.Fatal(err)
	}
	ctx := known.WithCluster(context.Background(), "b00")
	key := crclient.ObjectKey{Namespace: "bench-get", Name: "obj-000"}
	for _, bc := range []struct {
		name string
		c    crclient.Client
	}{{"direct", mgr.GetClient()}, {"fanout", srv.GetClient()}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var cm corev1.ConfigMap
			for b.Loop() {
				if err := bc.c.Get(ctx, key, &cm); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkList compares a one-cluster List through the fan-out client with
// the member's own client.
func BenchmarkList(b *testing.B) {
	srv, _ := benchServer(b)
	mgr, err := srv.GetManager("b00")
	if err != nil {
		b.Fatal(err)
	}
	ctx := known.WithCluster(context.Background(), "b00")
	for _, bc := range []struct {
		name string
		c    crclient.Client
	}{{"direct", mgr.GetClient()}, {"fanout", srv.GetClient()}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var list corev1.ConfigMapList
				if err := bc.c.List(ctx, &list, crclient.InNamespace("bench-10")); err != nil || len(list.Items) != 10 {
					b.Fatal(err, len(list.Items))
				}
			}
		})
	}
}

// BenchmarkListFleet lists across 1, 5 and 20 members: first with 10 items
// in every member (the work grows with the fleet), then with 200 items in
// all, spread over the members (the work stays the same; what grows is the
// fan-out's own cost); and with 10 annotated items in every member.
func BenchmarkListFleet(b *testing.B) {
	srv, names := benchServer(b)
	c := srv.GetClient()
	run := func(b *testing.B, n int, ns string, want int) {
		ctx := known.WithClusters(context.Background(), names[:n]...)
		b.ReportAllocs()
		for b.Loop() {
			var list corev1.ConfigMapList
			if err := c.List(ctx, &list, crclient.InNamespace(ns)); err != nil || len(list.Items) != want {
				b.Fatal(err, len(list.Items))
			}
		}
	}
	for _, n := range []int{1, 5, 20} {
		b.Run(fmt.Sprintf("per-cluster=10/clusters=%d", n), func(b *testing.B) { run(b, n, "bench-10", 10*n) })
	}
	for _, bc := range []struct {
		n  int
		ns string
	}{{1, "bench-200"}, {5, "bench-40"}, {20, "bench-10"}} {
		b.Run(fmt.Sprintf("total=200/clusters=%d", bc.n), func(b *testing.B) { run(b, bc.n, bc.ns, 200) })
	}
	b.Run("annotated/per-cluster=10/clusters=20", func(b *testing.B) { run(b, 20, benchAnnotated, 200) })
}
