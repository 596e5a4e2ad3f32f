package schedwait

import (
	"cmp"
	"math"
	"runtime/metrics"
	"sync"
	"time"
)

// latencies is the runtime metric read: a histogram of the time
// goroutines spent runnable before they ran, sampled by the scheduler.
const latencies = "/sched/latencies:seconds"

// Gauge says whether goroutines have been waiting for a CPU lately: over
// the scheduler's samples since the previous reading, at least MinWindow
// old and holding at least MinSamples, their mean wait is at least
// Threshold. With fewer samples it keeps its last verdict. A reading more
// than MaxWindow after the one before starts afresh, saying "not
// waiting": what the scheduler saw that long ago tells nothing of now,
// and the next reading will have a window of its own. The zero Gauge uses
// the defaults below. Safe for concurrent use; a reading costs a few
// microseconds, and calls within MinWindow of the last reading cost a
// lock.
type Gauge struct {
	// Threshold is the mean wait from which goroutines are said to wait
	// for a CPU. Default 200µs: a free core takes a runnable goroutine in
	// microseconds; cores that other processes keep busy make it wait
	// tenths of a millisecond on average (the kernel runs this process's
	// threads in turns with theirs), and every core of this process busy
	// milliseconds (a runnable goroutine waits for a running one to block
	// or be preempted, every 10ms).
	Threshold time.Duration
	// MinWindow is the shortest time between two readings. Default 10ms.
	MinWindow time.Duration
	// MaxWindow is the longest window a verdict is made on. Default 1s.
	MaxWindow time.Duration
	// MinSamples is the fewest samples a verdict is made on. Default 16.
	MinSamples uint64

	mu      sync.Mutex
	sample  [1]metrics.Sample
	last    []uint64 // counts at the last reading
	lastAt  time.Time
	waiting bool
}

// Waiting reports whether goroutines have been waiting for a CPU lately.
func (g *Gauge) Waiting() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if !g.lastAt.IsZero() && now.Sub(g.lastAt) < cmp.Or(g.MinWindow, 10*time.Millisecond) {
		return g.waiting
	}
	g.sample[0].Name = latencies
	metrics.Read(g.sample[:])
	if g.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return false // not in this runtime
	}
	h := g.sample[0].Value.Float64Histogram()
	if g.last == nil || now.Sub(g.lastAt) > cmp.Or(g.MaxWindow, time.Second) {
		g.last = append(g.last[:0], h.Counts...)
		g.lastAt = now
		g.waiting = false
		return false
	}
	n, mean := meanSince(g.last, h)
	if n < cmp.Or(g.MinSamples, 16) {
		return g.waiting // too few to tell: wait for more
	}
	copy(g.last, h.Counts)
	g.lastAt = now
	g.waiting = mean >= cmp.Or(g.Threshold, 200*time.Microsecond).Seconds()
	return g.waiting
}

// meanSince returns how many samples h holds beyond the counts last, and
// their mean, each sample taken at its bucket's lower bound (0 for the
// first bucket, which starts at minus infinity).
func meanSince(last []uint64, h *metrics.Float64Histogram) (n uint64, mean float64) {
	var sum float64
	for i, c := range h.Counts {
		if i >= len(last) {
			break
		}
		d := c - last[i]
		if d == 0 {
			continue
		}
		lo := h.Buckets[i]
		if math.IsInf(lo, -1) || lo < 0 {
			lo = 0
		}
		n += d
		sum += float64(d) * lo
	}
	if n == 0 {
		return 0, 0
	}
	return n, sum / float64(n)
}
