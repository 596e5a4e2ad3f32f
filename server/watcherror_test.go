package server

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// counterValue reads a counter as a scrape would.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestWatchErrorCountedOnceKept: whoever sees mccr_watch_errors_total grow
// finds the errors counted in WatchErrors, also while the log line of the
// error is still being written (a slow log sink).
func TestWatchErrorCountedOnceKept(t *testing.T) {
	const kind, n = "server.orderingWatcher", maxWatchErrors
	slowLog := funcr.New(func(_, _ string) { time.Sleep(2 * time.Millisecond) }, funcr.Options{})
	s := &Server{log: slowLog}
	counter := watchErrorsTotal.WithLabelValues(kind)
	before := counterValue(t, counter)

	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			s.watchError(kind, fmt.Errorf("broken object %d: %w", i, errors.ErrUnsupported))
		}
	})
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		counted := int(counterValue(t, counter) - before)
		if kept := len(s.WatchErrors()); kept < counted {
			t.Fatalf("mccr_watch_errors_total counted %d errors, WatchErrors holds %d", counted, kept)
		}
		select {
		case <-done:
			if kept := len(s.WatchErrors()); kept != n {
				t.Fatalf("WatchErrors holds %d errors, want %d", kept, n)
			}
			return
		default:
		}
	}
}
