package shard

import (
	"cmp"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
)

// DefaultLoadFactor bounds a replica's load to ceil(1.25 × average).
const DefaultLoadFactor = 1.25

// virtualNodes is how many points each replica has on the ring: enough for
// an even spread over a few replicas, few enough to rebuild the ring often.
const virtualNodes = 128

// Input is what an assignment depends on.
type Input struct {
	// Replicas are the live replicas' identities.
	Replicas []string
	// Names are the clusters to assign.
	Names []string
	// Pins assign a cluster to a replica whenever that replica is live.
	Pins map[string]string
	// LoadFactor bounds each replica's load to ceil(LoadFactor × average);
	// below 1 (or unset) it is DefaultLoadFactor. Pinned clusters count
	// towards their replica's load but are never moved for it.
	LoadFactor float64
}

// Assign returns each name's replica (none when no replica is live).
func Assign(in Input) map[string]string {
	out := make(map[string]string, len(in.Names))
	if len(in.Replicas) == 0 || len(in.Names) == 0 {
		return out
	}
	replicas := slices.Clone(in.Replicas)
	slices.Sort(replicas)
	replicas = slices.Compact(replicas)
	live := make(map[string]bool, len(replicas))
	for _, r := range replicas {
		live[r] = true
	}
	capacity := int(math.Ceil(validLoadFactor(in.LoadFactor) * float64(len(in.Names)) / float64(len(replicas))))
	load := make(map[string]int, len(replicas))

	type item struct {
		name string
		h    uint64
	}
	free := make([]item, 0, len(in.Names))
	for _, n := range in.Names {
		if r, ok := in.Pins[n]; ok && live[r] {
			out[n] = r
			load[r]++
			continue
		}
		free = append(free, item{n, hash(n)})
	}
	// Names are placed in ring order, so that the result does not depend on
	// the order they were given in.
	slices.SortFunc(free, func(a, b item) int { return cmp.Or(cmp.Compare(a.h, b.h), cmp.Compare(a.name, b.name)) })

	ring := newRing(replicas)
	for _, it := range free {
		start := ring.search(it.h)
		for i := range len(ring.points) {
			r := ring.points[(start+i)%len(ring.points)].replica
			if load[r] < capacity {
				out[it.name] = r
				load[r]++
				break
			}
		}
		if _, ok := out[it.name]; !ok {
			// Every replica is at capacity (pins took more than their
			// share): fall back to the ring's owner.
			r := ring.points[start%len(ring.points)].replica
			out[it.name] = r
			load[r]++
		}
	}
	return out
}

type point struct {
	h       uint64
	replica string
}

type ring struct{ points []point }

func newRing(replicas []string) ring {
	pts := make([]point, 0, len(replicas)*virtualNodes)
	for _, r := range replicas {
		for i := range virtualNodes {
			pts = append(pts, point{hash(r + "#" + strconv.Itoa(i)), r})
		}
	}
	slices.SortFunc(pts, func(a, b point) int { return cmp.Or(cmp.Compare(a.h, b.h), cmp.Compare(a.replica, b.replica)) })
	return ring{pts}
}

// search returns the index of the first point at or after h.
func (r ring) search(h uint64) int {
	i, _ := slices.BinarySearchFunc(r.points, h, func(p point, h uint64) int { return cmp.Compare(p.h, h) })
	return i % len(r.points)
}

// hash is FNV-1a, mixed (splitmix64's finalizer) so that similar names
// spread over the whole ring.
func hash(s string) uint64 {
	f := fnv.New64a()
	_, _ = f.Write([]byte(s)) // a hash's Write never fails
	x := f.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// validLoadFactor is f, or DefaultLoadFactor when f is below 1 or NaN.
func validLoadFactor(f float64) float64 {
	if !(f >= 1) {
		return DefaultLoadFactor
	}
	return f
}
