package server

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/config"
)

// TestStatusesAndNamesFollowTheFleet: Statuses and ClusterNames list
// exactly the members, sorted by name, through adds, deletes and names
// added again, also while other goroutines change the fleet (run with
// -race).
func TestStatusesAndNamesFollowTheFleet(t *testing.T) {
	srv := unstartedServer(t)
	rng := rand.New(rand.NewPCG(3, 4))
	want := map[string]bool{}
	check := func(step int) {
		t.Helper()
		exp := slices.Sorted(func(yield func(string) bool) {
			for n := range want {
				if !yield(n) {
					return
				}
			}
		})
		statuses := srv.Statuses()
		got := make([]string, 0, len(statuses))
		for _, st := range statuses {
			got = append(got, st.Name)
		}
		if !slices.Equal(got, exp) {
			t.Fatalf("step %d: Statuses() names %v\nwant %v", step, got, exp)
		}
		if names := srv.ClusterNames(); !slices.Equal(names, exp) {
			t.Fatalf("step %d: ClusterNames() = %v\nwant %v", step, names, exp)
		}
	}
	// A name deleted and added again (a new record), and one deleted
	// while another is added, between two reads: as many members as
	// before, not the same.
	for _, name := range []string{"m-1", "m-2"} {
		if err := srv.Add(config.NewNamedConfig(name, &rest.Config{Host: "https://127.0.0.1:1"})); err != nil {
			t.Fatal(err)
		}
		want[name] = true
	}
	check(-3)
	for _, op := range []struct {
		name string
		add  bool
	}{{"m-1", false}, {"m-1", true}, {"m-2", false}, {"m-3", true}} {
		var err error
		if op.add {
			err = srv.Add(config.NewNamedConfig(op.name, &rest.Config{Host: "https://127.0.0.1:1"}))
			want[op.name] = true
		} else {
			err = srv.Delete(op.name)
			delete(want, op.name)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	check(-2)
	for step := range 3000 {
		// Names that are prefixes of each other, and sort around them.
		name := fmt.Sprintf("m-%d", rng.IntN(60))
		if rng.IntN(4) == 0 {
			name += "-0"
		}
		if want[name] {
			if err := srv.Delete(name); err != nil {
				t.Fatal(err)
			}
			delete(want, name)
		} else {
			if err := srv.Add(config.NewNamedConfig(name, &rest.Config{Host: "https://127.0.0.1:1"})); err != nil {
				t.Fatal(err)
			}
			want[name] = true
		}
		if step < 300 || step%2 == 0 {
			check(step)
		}
	}
	check(-1)

	// Readers while writers add and delete names of their own.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				st := srv.Statuses()
				if !slices.IsSortedFunc(st, func(a, b ClusterStatus) int { return strings.Compare(a.Name, b.Name) }) {
					t.Error("Statuses() not sorted")
					return
				}
			}
		})
	}
	var writers sync.WaitGroup
	for w := range 2 {
		writers.Go(func() {
			for i := range 400 {
				name := fmt.Sprintf("w%d-%d", w, i%20)
				if i/20%2 == 0 {
					_ = srv.Add(config.NewNamedConfig(name, &rest.Config{Host: "https://127.0.0.1:1"}))
				} else {
					_ = srv.Delete(name)
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	wg.Wait()
	for _, n := range srv.ClusterNames() {
		_ = srv.Delete(n)
	}
}

// BenchmarkStatuses is Statuses, ClusterNames and Status of one member
// with 10,000 members (never started, so Pending).
func BenchmarkStatuses(b *testing.B) {
	const n = 10000
	srv := unstartedServer(b)
	for i := range n {
		if err := srv.Add(config.NewNamedConfig(fmt.Sprintf("cluster-%05d", i), &rest.Config{Host: "https://127.0.0.1:1"})); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		for i := range n {
			_ = srv.Delete(fmt.Sprintf("cluster-%05d", i))
		}
	})
	b.Run("Statuses", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if len(srv.Statuses()) != n {
				b.Fatal("members lost")
			}
		}
	})
	b.Run("ClusterNames", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if len(srv.ClusterNames()) != n {
				b.Fatal("members lost")
			}
		}
	})
	b.Run("Status", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := srv.Status("cluster-05000"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
