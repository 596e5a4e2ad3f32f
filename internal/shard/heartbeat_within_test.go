package shard

import (
	"testing"
	"time"
)

// TestWithinOnBothClocks: the renew deadline passes when either clock
// says so. A test cannot step the wall clock or suspend the machine, but
// it can hand within times that carry a monotonic reading and times that
// do not (whose difference is the wall clocks').
func TestWithinOnBothClocks(t *testing.T) {
	const d = 2 * time.Second
	sent := time.Now() // with a monotonic reading
	for _, tc := range []struct {
		name string
		now  time.Time
		want bool
	}{
		{"monotonic, inside", sent.Add(d - time.Millisecond), true},
		{"monotonic, past", sent.Add(d), false},
		{"wall alone, inside", sent.Add(d - time.Millisecond).Round(0), true},
		{"wall alone, past", sent.Add(d).Round(0), false},
		{"wall gone back", sent.Add(-time.Hour).Round(0), true},
	} {
		if got := within(sent, tc.now, d); got != tc.want {
			t.Errorf("%s: within = %v, want %v", tc.name, got, tc.want)
		}
	}
}
