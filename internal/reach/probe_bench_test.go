package reach

import (
	"context"
	"testing"
	"time"
)

// BenchmarkProbe is one probe of an API server that answers at once: what
// each member's periodic probe costs the process (every ReachProbeInterval,
// thousands of members), the API server's side included.
func BenchmarkProbe(b *testing.B) {
	s := newAPIServer(b, 0)
	cfg := s.config(b)
	cfg.QPS = -1 // as a member's (Options.MemberQPS): no client-side limit
	m, err := New(cfg, Options{Interval: time.Hour, Timeout: 5 * time.Second}, newEvents())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if res, ok := m.probe(ctx); !ok || res.Err != nil {
			b.Fatalf("probe: %v", res.Err)
		}
	}
}
