package shard

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"testing"
)

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("ns-%d/cluster-%d", i%7, i)
	}
	return out
}

func loads(a map[string]string) map[string]int {
	l := map[string]int{}
	for _, r := range a {
		l[r]++
	}
	return l
}

func TestAssignBoundsLoad(t *testing.T) {
	for _, tc := range []struct{ replicas, clusters int }{{1, 10}, {3, 30}, {4, 30}, {5, 1000}, {7, 13}, {10, 3}} {
		t.Run(fmt.Sprintf("%dx%d", tc.replicas, tc.clusters), func(t *testing.T) {
			rs := make([]string, 0, tc.replicas)
			for i := range tc.replicas {
				rs = append(rs, fmt.Sprintf("replica-%d", i))
			}
			// No factor, one below 1 and NaN are all the default.
			for _, factor := range []float64{0, 0.5, math.NaN()} {
				a := Assign(Input{Replicas: rs, Names: names(tc.clusters), LoadFactor: factor})
				if len(a) != tc.clusters {
					t.Fatalf("factor %v: %d of %d clusters assigned", factor, len(a), tc.clusters)
				}
				limit := int(math.Ceil(DefaultLoadFactor * float64(tc.clusters) / float64(tc.replicas)))
				for r, n := range loads(a) {
					if n > limit {
						t.Errorf("factor %v: %s carries %d clusters, over the bound %d", factor, r, n, limit)
					}
				}
			}
		})
	}
}

func TestAssignIsDeterministic(t *testing.T) {
	rs := []string{"a", "b", "c"}
	ns := names(50)
	want := Assign(Input{Replicas: rs, Names: ns})
	for range 20 {
		r2, n2 := append([]string(nil), rs...), append([]string(nil), ns...)
		rand.Shuffle(len(r2), func(i, j int) { r2[i], r2[j] = r2[j], r2[i] })
		rand.Shuffle(len(n2), func(i, j int) { n2[i], n2[j] = n2[j], n2[i] })
		if got := Assign(Input{Replicas: r2, Names: n2}); !maps.Equal(got, want) {
			t.Fatal("the same replicas and names in another order gave another assignment")
		}
	}
}

// TestAssignMovesFew: a replica joining takes about its share, and the
// others keep the rest; one leaving hands over only its own.
func TestAssignMovesFew(t *testing.T) {
	ns := names(300)
	three := Assign(Input{Replicas: []string{"a", "b", "c"}, Names: ns})
	four := Assign(Input{Replicas: []string{"a", "b", "c", "d"}, Names: ns})
	moved := 0
	for n, r := range three {
		if four[n] != r {
			moved++
		}
	}
	// An ideal scheme moves 1/4 (75); bounded loads add a little.
	t.Logf("joining: %d of %d moved", moved, len(ns))
	if moved > len(ns)*2/5 {
		t.Errorf("a fourth replica moved %d of %d clusters", moved, len(ns))
	}
	two := Assign(Input{Replicas: []string{"a", "b"}, Names: ns})
	moved = 0
	for n, r := range three {
		if r != "c" && two[n] != r {
			moved++
		}
	}
	t.Logf("leaving: %d clusters of the remaining replicas moved", moved)
	if moved > len(ns)/5 {
		t.Errorf("a replica leaving moved %d clusters it did not own", moved)
	}
}

func TestAssignPins(t *testing.T) {
	ns := names(30)
	pins := map[string]string{ns[0]: "c", ns[1]: "c", ns[2]: "gone"}
	a := Assign(Input{Replicas: []string{"a", "b", "c"}, Names: ns, Pins: pins})
	if a[ns[0]] != "c" || a[ns[1]] != "c" {
		t.Errorf("pinned clusters on %s and %s, want c", a[ns[0]], a[ns[1]])
	}
	if a[ns[2]] == "" || a[ns[2]] == "gone" {
		t.Errorf("a cluster pinned to a replica that is not live got %q", a[ns[2]])
	}
	if len(Assign(Input{Names: ns})) != 0 {
		t.Error("clusters assigned with no replica live")
	}
}
