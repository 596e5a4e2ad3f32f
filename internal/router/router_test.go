package router

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/mccr-dev/mccr/client"
)

// TestElsewhere: a cluster another replica runs is known by name, fails
// calls aimed at it with ErrClusterElsewhere naming its owner, and is left
// out of fleet-wide calls; Set makes it this replica's again.
func TestElsewhere(t *testing.T) {
	var tab Table
	c := fake.NewClientBuilder().Build()
	tab.Set("mine", c, true)
	tab.SetElsewhere("theirs", "replica-2")
	tab.SetElsewhere("nobodys", "")

	if got := tab.Names(); !slices.Equal(got, []string{"mine", "nobodys", "theirs"}) {
		t.Errorf("Names() = %v", got)
	}
	if n := len(tab.Members()); n != 1 || tab.Members()[0].Name != "mine" {
		t.Errorf("Members() = %v, want only this replica's cluster", tab.Members())
	}
	for _, name := range []string{"theirs", "nobodys"} {
		if _, err := tab.Route(name); !errors.Is(err, client.ErrClusterElsewhere) {
			t.Errorf("Route(%s) = %v, want ErrClusterElsewhere", name, err)
		}
		if _, err := tab.Cluster(name); !errors.Is(err, client.ErrClusterElsewhere) {
			t.Errorf("Cluster(%s) = %v, want ErrClusterElsewhere", name, err)
		}
	}
	if _, err := tab.Route("theirs"); err == nil || !strings.Contains(err.Error(), "replica-2") {
		t.Errorf("the error does not name the owner: %v", err)
	}

	// Taken over here: routable again, in fleet-wide calls again.
	tab.Set("theirs", nil, false)
	if _, err := tab.Route("theirs"); !errors.Is(err, client.ErrClusterNotReady) {
		t.Errorf("Route after Set(nil) = %v, want ErrClusterNotReady", err)
	}
	tab.Set("theirs", c, true)
	if _, err := tab.Route("theirs"); err != nil {
		t.Errorf("Route after Set = %v", err)
	}
	if n := len(tab.ReadyClusters()); n != 2 {
		t.Errorf("%d ready clusters, want 2", n)
	}
}
