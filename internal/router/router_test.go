package router

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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

// TestListsFollowEveryChange: the sorted lists (built once per snapshot,
// on first read) always show the table as the last change left it, also
// while writers change entries in place and readers read concurrently.
func TestListsFollowEveryChange(t *testing.T) {
	var tab Table
	c := fake.NewClientBuilder().Build()
	names := []string{"d", "b", "a", "c"}
	for _, n := range names {
		tab.Set(n, nil, false)
		_ = tab.Members() // build this snapshot's lists before the next change
	}
	tab.Set("b", c, false)
	tab.Set("c", c, true)
	tab.SetUnreachable("c", errors.New("down"))
	tab.Set("a", c, true)
	tab.Remove("d")

	if got := tab.Names(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("Names() = %v", got)
	}
	errs := map[string]error{}
	for _, m := range tab.Members() {
		errs[m.Name] = m.Err
	}
	if errs["a"] != nil || errs["b"] != nil || !errors.Is(errs["c"], client.ErrClusterUnreachable) {
		t.Errorf("Members() errors = %v, want a and b nil, c unreachable", errs)
	}
	if ready := tab.ReadyClusters(); len(ready) != 1 || ready[0].Name != "a" {
		t.Errorf("ReadyClusters() = %v, want only a (b syncs, c unreachable)", ready)
	}

	// Concurrent writers on known and new names, readers checking that
	// every list they see is sorted and consistent with itself.
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				members, ready := tab.Members(), tab.ReadyClusters()
				if !slices.IsSortedFunc(members, func(a, b client.Member) int { return strings.Compare(a.Name, b.Name) }) {
					t.Error("Members() not sorted")
					return
				}
				for _, r := range ready {
					if r.Err != nil || r.Client == nil {
						t.Errorf("ReadyClusters() holds %s with error %v, client %v", r.Name, r.Err, r.Client)
						return
					}
				}
			}
		})
	}
	var writers sync.WaitGroup
	for w := range 4 {
		writers.Go(func() {
			for i := range 16 * 20 { // 16 rounds over 20 names
				n := fmt.Sprintf("w%d-%d", w, i%20)
				switch i / 20 % 4 {
				case 0:
					tab.Set(n, nil, false)
				case 1:
					tab.Set(n, c, true)
				case 2:
					tab.SetUnreachable(n, errors.New("down"))
				case 3:
					tab.Remove(n)
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	readers.Wait()
	// Every writer's last round removed its names.
	if got := tab.Names(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("Names() after the writers = %v", got)
	}
}

// BenchmarkJoin is a fleet of 1,000 joining: each name is added, gets its
// client and turns Ready, as a member's start does.
func BenchmarkJoin(b *testing.B) {
	c := fake.NewClientBuilder().Build()
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("cluster-%04d", i)
	}
	for b.Loop() {
		var tab Table
		for _, n := range names {
			tab.Set(n, nil, false)
			tab.Set(n, c, false)
			tab.Set(n, c, true)
		}
	}
}

// TestReachableEndsWhenMarkedUnreachable: a member's Reachable context
// ends when it is marked unreachable, its cause the error fleet-wide Lists
// report, while its route (Context) goes on; marked reachable again, the
// member has a new one, which ends with the route.
func TestReachableEndsWhenMarkedUnreachable(t *testing.T) {
	var tab Table
	tab.Set("a", fake.NewClientBuilder().Build(), true)
	first := tab.Members()[0]
	if first.Reachable == nil || first.Reachable.Err() != nil {
		t.Fatalf("Ready member's Reachable = %v", first.Reachable)
	}
	cause := errors.New("dial tcp: i/o timeout")
	tab.SetUnreachable("a", cause)
	if err := context.Cause(first.Reachable); !errors.Is(err, client.ErrClusterUnreachable) || !errors.Is(err, cause) {
		t.Errorf("Reachable's cause once marked unreachable = %v", err)
	}
	if first.Context.Err() != nil {
		t.Error("the route ended with the mark")
	}
	tab.SetUnreachable("a", nil)
	second := tab.Members()[0]
	if second.Reachable == nil || second.Reachable.Err() != nil || second.Context != first.Context {
		t.Errorf("reachable again: %+v", second)
	}
	tab.Remove("a")
	if second.Reachable.Err() == nil {
		t.Error("Reachable alive after Remove")
	}
	if m, err := tab.Route("b"); err == nil || m.Reachable != nil {
		t.Errorf("Route of an unknown name = %+v, %v", m, err)
	}
}

// TestRouteEndsOnceReplaced: a call woken by its route's end that looks
// the name up again sees what replaced the route (gone, not Ready,
// elsewhere, a new client), never the route that just ended: the fan-out
// client picks ErrClusterNotFound or ErrClusterNotReady for a write cut
// off by Delete or Update by looking the name up at that instant.
func TestRouteEndsOnceReplaced(t *testing.T) {
	c, next := fake.NewClientBuilder().Build(), fake.NewClientBuilder().Build()
	ends := []struct {
		name string
		end  func(*Table)
		want func(client.Member, error) bool
	}{
		{"removed", func(tab *Table) { tab.Remove("m") }, func(_ client.Member, err error) bool {
			return errors.Is(err, client.ErrClusterNotFound)
		}},
		{"not ready", func(tab *Table) { tab.Set("m", nil, false) }, func(_ client.Member, err error) bool {
			return errors.Is(err, client.ErrClusterNotReady)
		}},
		{"elsewhere", func(tab *Table) { tab.SetElsewhere("m", "replica-2") }, func(_ client.Member, err error) bool {
			return errors.Is(err, client.ErrClusterElsewhere)
		}},
		{"new client", func(tab *Table) { tab.Set("m", next, true) }, func(m client.Member, err error) bool {
			return err == nil && m.Client == next && m.Context.Err() == nil
		}},
	}
	for _, e := range ends {
		t.Run(e.name, func(t *testing.T) {
			stale := 0
			for range 300 {
				var tab Table
				tab.Set("m", c, true)
				m, err := tab.Route("m")
				if err != nil {
					t.Fatal(err)
				}
				seen := make(chan bool)
				go func() {
					<-m.Context.Done()
					seen <- e.want(tab.Route("m"))
				}()
				e.end(&tab)
				if !<-seen {
					stale++
				}
			}
			if stale > 0 {
				t.Errorf("%d of 300 lookups woken by the route's end saw the ended route", stale)
			}
		})
	}
}
