package server

import (
	"testing"
	"time"
)

// StopTimeout follows the members' graceful shutdown timeout, with
// controller-runtime's meaning of it: nil is 30s, zero does not wait,
// negative waits as long as it takes.
func TestStopTimeoutFollowsGracefulShutdownTimeout(t *testing.T) {
	d := func(v time.Duration) *time.Duration { return &v }
	for _, tc := range []struct {
		name     string
		graceful *time.Duration
		set      time.Duration
		want     time.Duration
	}{
		{"default", nil, 0, 35 * time.Second},
		{"no wait", d(0), 0, 5 * time.Second},
		{"ten seconds", d(10 * time.Second), 0, 15 * time.Second},
		{"forever", d(-1), 0, -1},
		{"set by the user", d(-1), 3 * time.Second, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{StopTimeout: tc.set}
			o.defaults(tc.graceful)
			if o.StopTimeout != tc.want {
				t.Errorf("StopTimeout %s, want %s", o.StopTimeout, tc.want)
			}
		})
	}
}
