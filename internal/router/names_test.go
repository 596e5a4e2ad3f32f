package router

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestNamesFollowEveryChange: whatever mix of names coming, going and
// coming back, and however many changes a read comes after (none, one, a
// few, more than a writer lets pile up), Names is the sorted set of names
// the changes leave.
func TestNamesFollowEveryChange(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	rng := rand.New(rand.NewPCG(1, 2))
	var tab Table
	want := map[string]bool{}
	check := func(step int) {
		t.Helper()
		if got, exp := tab.Names(), slices.Sorted(maps.Keys(want)); !slices.Equal(got, exp) {
			t.Fatalf("step %d: Names() = %v\nwant %v", step, got, exp)
		}
		if members := tab.Members(); len(members) != len(want) {
			t.Fatalf("step %d: %d members, want %d", step, len(members), len(want))
		}
	}
	for step := range 20000 {
		// Names that are prefixes of each other and sort in between.
		name := fmt.Sprintf("c-%d", rng.IntN(300))
		if rng.IntN(8) == 0 {
			name += "-x"
		}
		switch op := rng.IntN(10); {
		case op < 5:
			tab.Set(name, nil, false)
			want[name] = true
		case op < 7:
			tab.Set(name, c, true) // a known name: the names stay shared
			want[name] = true
		default:
			tab.Remove(name)
			delete(want, name)
		}
		// Reads after every change, after a few, after many.
		switch {
		case step < 2000, step%7 == 0, step%997 == 0:
			check(step)
		}
	}
	check(-1)
}

// TestNamesBoundedWithoutReads: a table whose names nobody reads keeps no
// record of every change ever made: writers build the list once enough
// changes wait for it, and a built list lets its predecessors go.
func TestNamesBoundedWithoutReads(t *testing.T) {
	var tab Table
	for i := range 5000 {
		// Rounds of 100 names coming, then going.
		name := fmt.Sprint("n-", i%100)
		if i/100%2 == 0 {
			tab.Set(name, nil, false)
		} else {
			tab.Remove(name)
		}
		if p := tab.load().names.pending; p > maxPending(tab.load().size) {
			t.Fatalf("change %d: %d changes wait for the first read, want at most %d", i, p, maxPending(tab.load().size))
		}
	}
	depth := 0
	for n := tab.load().names; n != nil; n = n.prev.Load() {
		depth++
	}
	if limit := maxPending(tab.load().size) + 1; depth > limit {
		t.Errorf("the names hold a chain of %d lists, want at most %d", depth, limit)
	}
}

// TestNamesConcurrentReads: readers that build the same lists at once,
// while writers add more, all see sorted lists of names that exist (run
// with -race).
func TestNamesConcurrentReads(t *testing.T) {
	var tab Table
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 4 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				names := tab.SortedNames()
				if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
					t.Errorf("names not sorted or repeated: %v", names)
					return
				}
			}
		})
	}
	var writers sync.WaitGroup
	for w := range 2 {
		writers.Go(func() {
			for i := range 3000 {
				name := fmt.Sprintf("w%d-%d", w, i%50)
				if i/50%2 == 0 {
					tab.Set(name, nil, false)
				} else {
					tab.Remove(name)
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	readers.Wait()
	if got := tab.Names(); len(got) != 0 {
		t.Errorf("Names() after every name went = %v", got)
	}
}

// BenchmarkNamesAfterJoin is ClusterNames with 10,000 clusters, each read
// coming after one more cluster joined: a merge and a copy.
func BenchmarkNamesAfterJoin(b *testing.B) {
	var tab Table
	for i := range 10000 {
		tab.Set(fmt.Sprintf("cluster-%05d", i), nil, false)
	}
	_ = tab.Names()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		name := fmt.Sprintf("extra-%d", i%100)
		if i%200 < 100 {
			tab.Set(name, nil, false)
		} else {
			tab.Remove(name)
		}
		if len(tab.Names()) < 10000 {
			b.Fatal("names lost")
		}
		i++
	}
}
