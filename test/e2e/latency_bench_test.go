package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/test"
)

// BenchmarkSlowNetwork is the fleet benchmark's run with every member far
// away: each cluster behind an endpoint of its own and, in front of that, a
// test.FaultProxy that delays every chunk of bytes by half the added round
// trip each way (the proxies run in the engine's process, and none is in
// front of the Server's host cluster). It registers 50 clusters of 100
// ConfigMaps at once (s-all-reconciled), then 20 more one at a time
// (register → first Reconcile, p50 and p99), with 50ms added to every round
// trip and, as the baseline, with the same proxies adding nothing. The
// clusters=500 runs register 500 clusters at once instead, mccr only: a
// fleet large enough that starts bounded by Options.MaxConcurrentStarts
// would queue behind each other's round trips, were the bound's slots held
// through them.
func BenchmarkSlowNetwork(b *testing.B) {
	type run struct {
		clusters int
		rtt      time.Duration
		eng      string
	}
	runs := make([]run, 0, 6)
	for _, rtt := range []time.Duration{0, 50 * time.Millisecond} {
		for _, eng := range []string{engineMCCR, enginePlain} {
			runs = append(runs, run{50, rtt, eng})
		}
	}
	for _, rtt := range []time.Duration{0, 50 * time.Millisecond} {
		runs = append(runs, run{500, rtt, engineMCCR})
	}
	for _, r := range runs {
		name := fmt.Sprintf("latency=%dms/%s", r.rtt.Milliseconds(), r.eng)
		if r.clusters != 50 {
			name = fmt.Sprintf("latency=%dms/clusters=%d/%s", r.rtt.Milliseconds(), r.clusters, r.eng)
		}
		b.Run(name, func(b *testing.B) {
			s := scale{Engine: r.eng, Clusters: r.clusters, Objects: 100, More: 20, Distinct: true, Proxied: true, AddedRTT: r.rtt}
			ns := scaleNamespace(b, s.Objects, s.kinds())
			for i := 0; i < b.N; i++ {
				fig := runScale(b, s, ns, scaleKubeconfigs(b, s))
				b.ReportMetric(fig.AllReconciled.Seconds(), "s-all-reconciled")
				b.ReportMetric(ms(fig.FirstP50), "ms-p50-first-reconcile")
				b.ReportMetric(ms(fig.FirstP99), "ms-p99-first-reconcile")
				checkFailures(b, fig.Failures, fig.FailureNotes)
			}
		})
	}
}

// behindProxies puts every config behind a FaultProxy of its own that adds
// rtt to each round trip (rtt/2 each way), and returns a function that
// closes them.
func behindProxies(tb testing.TB, configs []*config.NamedConfig, rtt time.Duration) (closeAll func()) {
	tb.Helper()
	proxies := make([]*test.FaultProxy, 0, len(configs))
	closeAll = func() {
		for _, p := range proxies {
			if err := p.Close(); err != nil {
				tb.Error(err)
			}
		}
	}
	for _, nc := range configs {
		p, err := test.StartFaultProxy(nc.Config)
		if err != nil {
			closeAll()
			tb.Fatalf("cluster %s: %v", nc.Name, err)
		}
		proxies = append(proxies, p)
		p.SetLatency(rtt / 2)
		nc.Config = p.Config()
	}
	return closeAll
}
