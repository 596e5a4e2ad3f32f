package server

import (
	"math"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
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

// TestBackoffDefaultsAndBounds: the default backoff never waits over its
// cap, jitter included; a Backoff given in part keeps what it sets; one
// that would retry ever faster, or with negative jitter, is refused.
func TestBackoffDefaultsAndBounds(t *testing.T) {
	o := Options{}
	o.defaults(nil)
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	b := o.Backoff
	var most time.Duration
	for range 200 {
		most = max(most, retryDelay(&b))
	}
	if most > time.Minute || most < 50*time.Second {
		t.Errorf("the default backoff's longest delay over 200 failures is %s, want up to its 1m cap", most)
	}
	// At the cap, the jitter still spreads the delays (members that failed
	// together do not retry in step), below the cap.
	distinct := map[time.Duration]bool{}
	for range 50 {
		d := retryDelay(&b)
		if d > time.Minute || d < 48*time.Second {
			t.Fatalf("a delay of %s at the cap, want 48s to 1m", d)
		}
		distinct[d] = true
	}
	if len(distinct) < 10 {
		t.Errorf("%d distinct delays among 50 at the cap", len(distinct))
	}

	o = Options{Backoff: wait.Backoff{Cap: 10 * time.Second, Jitter: 0.5}}
	o.defaults(nil)
	if o.Backoff.Cap != 10*time.Second || o.Backoff.Jitter != 0.5 || o.Backoff.Duration != time.Second || o.Backoff.Factor != 2 {
		t.Errorf("a Backoff given in part became %+v", o.Backoff)
	}
	b = o.Backoff
	for range 50 {
		if d := retryDelay(&b); d > 10*time.Second {
			t.Fatalf("a delay of %s over the 10s cap", d)
		}
	}

	for _, bad := range []wait.Backoff{
		{Duration: time.Second, Factor: 0.5},
		{Duration: time.Second, Factor: -2},
		{Duration: time.Second, Factor: math.NaN()},
		{Duration: time.Second, Factor: 2, Jitter: -1},
	} {
		o := Options{Backoff: bad}
		o.defaults(nil)
		if err := o.validate(); err == nil {
			t.Errorf("Backoff %+v accepted", bad)
		}
	}
	o = Options{Backoff: wait.Backoff{Duration: 3 * time.Second}} // Factor 0: a constant delay
	o.defaults(nil)
	if err := o.validate(); err != nil {
		t.Errorf("a constant backoff refused: %v", err)
	}
}

// TestNegativeMemberBurstRefused: a negative MemberBurst would give every
// member with a positive MemberQPS a token bucket that refuses each of its
// requests (client-go does not mend it); the Server refuses it instead.
func TestNegativeMemberBurstRefused(t *testing.T) {
	for _, qps := range []float32{0, 10} {
		o := Options{MemberQPS: qps, MemberBurst: -1}
		o.defaults(nil)
		if err := o.validate(); err == nil {
			t.Errorf("MemberQPS %v with MemberBurst -1 accepted", qps)
		}
	}
	o := Options{MemberQPS: 10}
	o.defaults(nil)
	if err := o.validate(); err != nil {
		t.Errorf("MemberBurst 0 (client-go's burst) refused: %v", err)
	}
}
