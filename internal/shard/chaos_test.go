package shard

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestSimChaos runs replicas through random faults — refused and hung
// calls, lost answers, views that lag, replicas starting at random times
// and in random order — and then lets the faults end: no cluster may ever
// run on two replicas, and once the faults end every cluster must run on
// exactly one, the one the assignment gives it. MCCR_SOAK runs more seeds.
func TestSimChaos(t *testing.T) {
	seeds := 16
	if os.Getenv("MCCR_SOAK") != "" {
		seeds = 2000
	}
	if s := os.Getenv("MCCR_CHAOS_SEED"); s != "" {
		n, _ := strconv.ParseUint(s, 10, 64)
		chaos(t, n, true)
		return
	}
	for seed := range uint64(seeds) {
		if !chaos(t, seed, false) {
			t.Fatalf("seed %d failed; MCCR_CHAOS_SEED=%d replays it with logs", seed, seed)
		}
	}
}

func chaos(t *testing.T, seed uint64, verbose bool) bool {
	ok := true
	t.Run(fmt.Sprint(seed), func(t *testing.T) {
		rng := rand.New(rand.NewPCG(seed, seed))
		s := newSim(t, 2+rng.IntN(7))
		s.quiet = !verbose
		n := 2 + rng.IntN(2)
		reps := make([]*simReplica, 0, n)
		for i := range n {
			r := s.add(fmt.Sprintf("r%d", i), defaultTiming, Options{})
			r.down = true // started below
			reps = append(reps, r)
		}
		pick := func() fault {
			switch x := rng.Float64(); {
			case x < 0.03:
				return refuse
			case x < 0.05:
				return hang
			case x < 0.10:
				return loseAns
			}
			return pass
		}
		for _, r := range reps {
			r.leases.setFault(func(string, string) fault { return pick() })
		}
		s.shuffle = rng
		for range 240 { // a minute
			for _, r := range reps {
				if r.down && rng.Float64() < 0.05 {
					r.down = false
				}
				r.stale = rng.Float64() < 0.3
			}
			s.step()
		}
		for _, r := range reps {
			r.down, r.stale = false, false
			r.leases.setFault(nil)
		}
		ids := make([]string, 0, n)
		for _, r := range reps {
			ids = append(ids, r.id)
		}
		want := Assign(Input{Replicas: ids, Names: s.names})
		s.until(30*time.Second, "every cluster on its replica once the faults ended", func() bool {
			owners := s.rec.owners()
			for _, name := range s.names {
				if len(owners[name]) != 1 || owners[name][0] != want[name] {
					return false
				}
			}
			return true
		})
		s.rec.noDoubles(t)
		ok = !t.Failed()
	})
	return ok
}
