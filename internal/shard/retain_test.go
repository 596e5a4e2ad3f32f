package shard

import (
	"fmt"
	"runtime"
	"testing"
	"time"
	"weak"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// clusterLease is a cluster's Lease of the group "fleet", held by holder.
func clusterLease(name, holder string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
	setMeta(l, "fleet", RoleCluster, "w")
	return l
}

// TestRelistKeepsNoList: the cache keeps the Leases a list brought, not
// the list: a Lease that stays unchanged through later lists must not hold
// the first list's whole array (every Lease of the group, as listed then)
// for as long as the Server runs.
func TestRelistKeepsNoList(t *testing.T) {
	c := newCache(clocktesting.NewFakeClock(time.Now()), "fleet", time.Second, 2*time.Second, nil)
	list := relistOnce(c)
	runtime.GC()
	if list.Value() != nil {
		t.Error("the cache holds the list its Leases came in")
	}
	if _, ok := c.get("c0"); !ok {
		t.Fatal("the listed Lease c0 is not in the cache")
	}
}

// relistOnce relists eight cluster Leases into c, as a LeaseList's Items
// bring them, and returns a weak pointer to their array.
func relistOnce(c *cache) weak.Pointer[[8]coordinationv1.Lease] {
	items := new([8]coordinationv1.Lease)
	for i := range items {
		items[i] = *versioned(clusterLease(fmt.Sprintf("c%d", i), "a"), "1")
	}
	c.relist(items[:])
	return weak.Make(items)
}

// TestPruneForgetsLeasesThatLeft: what the cache remembers of a cluster
// Lease's replaced versions, there to drop a lagging watch's copies of
// them, goes some time after the Lease itself did; a fleet whose clusters
// come and go does not add to the cache for good. Meanwhile a lagging
// copy is still dropped.
func TestPruneForgetsLeasesThatLeft(t *testing.T) {
	const duration = 8 * time.Second
	clk := clocktesting.NewFakeClock(time.Now())
	c := newCache(clk, "fleet", time.Second, 2*time.Second, nil)
	for i := range 100 {
		name := fmt.Sprintf("c%d", i)
		c.written(versioned(clusterLease(name, "a"), "1"))
		c.watched(versioned(clusterLease(name, "b"), "2"))
		c.watchedDelete(versioned(clusterLease(name, "b"), "2"))
	}
	c.written(versioned(clusterLease("stays", "a"), "1"))
	c.watched(versioned(clusterLease("stays", "b"), "2"))

	c.prune(clk.Now().Add(duration), duration)
	c.watched(versioned(clusterLease("c7", "b"), "2")) // a lagging watch
	if _, ok := c.get("c7"); ok {
		t.Fatal("a lagging watch brought back a deleted Lease before its history was due to go")
	}
	clk.Step(2 * duration)
	c.prune(clk.Now(), duration)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.superseded) != 1 || c.superseded["stays"] == nil {
		t.Errorf("histories after the Leases left: %d, want only the one of the Lease still there", len(c.superseded))
	}
}
