package test_test

import (
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/test"
)

// A running fleet grows and shrinks: an added cluster serves, is found by
// name and in Clusters, and a removed one is gone (its API server and its
// kubeconfig file) while the others keep serving.
func TestFleetAddAndRemove(t *testing.T) {
	before := fleet.Clusters
	added, err := fleet.Add("four")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if fleet.Cluster("four") != nil {
			_ = fleet.Remove("four")
		}
	})
	if len(added) != 1 || fleet.Cluster("four") != added[0] || !slices.Contains(fleet.Clusters, added[0]) {
		t.Fatalf("added cluster not in the fleet: %v", added)
	}
	if len(before) != 3 {
		t.Fatalf("Add changed a Clusters slice read before it: %d clusters", len(before))
	}
	four := added[0]
	var nsList corev1.NamespaceList
	if err := four.AdminClient(t).List(t.Context(), &nsList); err != nil {
		t.Fatalf("added cluster does not serve: %v", err)
	}
	if _, err := fleet.Add("four"); err == nil {
		t.Fatal("Add accepted a name the fleet has")
	}
	if _, err := fleet.Add("one"); err == nil {
		t.Fatal("Add accepted a name the fleet has")
	}

	start := time.Now()
	if err := fleet.Remove("four"); err != nil {
		t.Fatal(err)
	}
	t.Logf("Remove took %s", time.Since(start).Round(time.Millisecond))
	if fleet.Cluster("four") != nil || len(fleet.Clusters) != 3 {
		t.Fatalf("removed cluster still in the fleet")
	}
	if _, err := os.Stat(four.KubeconfigPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("kubeconfig of a removed cluster: %v", err)
	}
	cl, err := client.New(four.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.List(t.Context(), &nsList); err == nil {
		t.Fatal("a removed cluster still serves")
	}
	if err := fleet.Remove("four"); err == nil {
		t.Fatal("Remove of an unknown cluster succeeded")
	}
	if err := fleet.Cluster("one").AdminClient(t).List(t.Context(), &nsList); err != nil {
		t.Fatalf("the rest of the fleet: %v", err)
	}
}

// A fleet stopped while its user still holds connections (a cleanup order
// that stops the fleet first) stops promptly: a test cluster needs no
// graceful shutdown.
func TestFleetStopsPromptlyUnderWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an API server of its own; make test runs it")
	}
	f := test.NewFleet(t, test.Options{}, "watched")
	cl, err := client.NewWithWatch(f.Cluster("watched").Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cl.Watch(t.Context(), &corev1.ConfigMapList{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	start := time.Now()
	if err := f.Stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Stop took %s with a watch open", d)
	} else {
		t.Logf("Stop took %s with a watch open", d.Round(time.Millisecond))
	}
}
