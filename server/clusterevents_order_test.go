package server_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mcclient "github.com/mccr-dev/mccr/client"
	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// TestClusterEventsAfterTheFact: a host aggregator that reads the fleet
// when told of a change finds the change already there, every time — a
// member told Ready is served by the fan-out client, one told Left is gone
// from it and from ClusterNames, one told Unreachable reads as
// unreachable — through join/leave cycles and API server outages.
func TestClusterEventsAfterTheFact(t *testing.T) {
	ns := testNamespace(t)
	r := startServer(t, ns, nil)
	srv := r.srv
	addReady(t, srv, "m1", "m2")
	victims, err := fleet.Add("events-" + ns)
	if err != nil {
		t.Fatal(err)
	}
	victim := victims[0]
	t.Cleanup(func() { _ = fleet.Remove(victim.Name) })
	fleet.CreateNamespace(t, ns) // the new member too
	for _, c := range []*test.Cluster{fleet.Cluster("m1"), fleet.Cluster("m2"), victim} {
		createIn(t, c, ns, "marker")
	}
	if err := srv.Add(config.NewNamedConfig("victim", victim.Config)); err != nil {
		t.Fatal(err)
	}
	waitReady(t, srv, "victim")

	var mu sync.Mutex
	var wrong []string
	told := map[string]int{} // "cluster/type" → times told
	check := func(ev server.ClusterEvent) {
		// The aggregator's read: a fleet-wide List, as the README suggests.
		lctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // no cluster named: the whole fleet
		defer cancel()
		var cms corev1.ConfigMapList
		var partial mcclient.Partial
		listErr := srv.GetClient().List(lctx, &cms, crclient.InNamespace(ns), &partial)
		listed := false
		for _, cm := range cms.Items {
			if cm.Name == "marker" && cm.Annotations[known.ClusterAnnotation] == ev.Cluster {
				listed = true
			}
		}
		names := srv.ClusterNames()
		failed := partial.Failed[ev.Cluster]
		var bad string
		switch {
		case listErr != nil:
			bad = fmt.Sprintf("fleet-wide List: %v", listErr)
		case ev.Type == server.ClusterReady && (!listed || failed != nil):
			bad = fmt.Sprintf("after Ready: listed %v, error %v", listed, failed)
		case ev.Type == server.ClusterLeft && (listed || failed != nil || slices.Contains(names, ev.Cluster)):
			bad = fmt.Sprintf("after Left: listed %v, error %v, ClusterNames %v", listed, failed, names)
		case ev.Type == server.ClusterUnreachable && !errors.Is(failed, mcclient.ErrClusterUnreachable):
			bad = fmt.Sprintf("after Unreachable: listed %v, error %v", listed, failed)
		}
		// The fleet may have moved on since; only a read that disagrees
		// with a state that still stands is wrong.
		st, err := srv.Status(ev.Cluster)
		stands := ev.Type == server.ClusterLeft && errors.Is(err, server.ErrClusterNotFound) ||
			err == nil && string(st.Phase) == string(ev.Type)
		mu.Lock()
		defer mu.Unlock()
		told[ev.Cluster+"/"+string(ev.Type)]++
		if bad != "" && stands {
			wrong = append(wrong, ev.Cluster+": "+bad)
		}
	}
	err = ctrl.NewControllerManagedBy(srv.GetHostManager()).Named("aggregate-" + ns).
		WatchesRawSource(server.ClusterEvents(srv, func(ctx context.Context, ev server.ClusterEvent) []reconcile.Request {
			check(ev)
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: "fleet"}}}
		})).
		Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil }))
	if err != nil {
		t.Fatal(err)
	}
	count := func(key string) int {
		mu.Lock()
		defer mu.Unlock()
		return told[key]
	}

	for _, name := range []string{"m1", "m2", "victim"} {
		test.Eventually(t, 30*time.Second, name+" Ready told when the controller starts", func() bool { return count(name+"/Ready") > 0 })
	}
	const cycles = 20
	for i := range cycles {
		name := []string{"m1", "m2"}[i%2]
		left, joined := count(name+"/Left"), count(name+"/Ready")
		if err := srv.Delete(name); err != nil {
			t.Fatal(err)
		}
		test.Eventually(t, 10*time.Second, name+" Left told", func() bool { return count(name+"/Left") > left })
		if err := srv.Add(fleet.Cluster(name).Named); err != nil {
			t.Fatal(err)
		}
		test.Eventually(t, 30*time.Second, name+" Ready told", func() bool { return count(name+"/Ready") > joined })
	}
	const outages = 3
	for range outages {
		down, up := count("victim/Unreachable"), count("victim/Ready")
		if err := victim.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		test.Eventually(t, 30*time.Second, "victim Unreachable told", func() bool { return count("victim/Unreachable") > down })
		if err := victim.StartAPIServer(t.Context()); err != nil {
			t.Fatal(err)
		}
		test.Eventually(t, 60*time.Second, "victim Ready again told", func() bool { return count("victim/Ready") > up })
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("figure: ClusterEvents read back: %d leaves, %d joins, %d outages; %d reads that disagreed with the event",
		told["m1/Left"]+told["m2/Left"], told["m1/Ready"]+told["m2/Ready"], told["victim/Unreachable"], len(wrong))
	for _, w := range wrong {
		t.Error(w)
	}
}

func createIn(t testing.TB, c *test.Cluster, ns, name string) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	cm.Namespace, cm.Name = ns, name
	if err := c.AdminClient(t).Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
}
