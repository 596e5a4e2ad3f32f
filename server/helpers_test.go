package server_test

import (
	"errors"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

type corev1ConfigMap = corev1.ConfigMap

func envtestUser(name string) envtest.User {
	return envtest.User{Name: name, Groups: []string{"system:masters"}}
}

// waitGoroutines waits until the number of goroutines is back to at most
// baseline, and dumps them if it is not within the deadline.
func waitGoroutines(t testing.TB, baseline int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
			t.Fatalf("%d goroutines, baseline %d", runtime.NumGoroutine(), baseline)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// settledGoroutines returns the goroutine count once it has stopped
// changing (workers and connections of a just-started Manager come up a
// little after it reports Ready).
func settledGoroutines() int {
	last := runtime.NumGoroutine()
	for range 20 {
		time.Sleep(250 * time.Millisecond)
		n := runtime.NumGoroutine()
		if n == last {
			return n
		}
		last = n
	}
	return last
}

func isNotFound(err error) bool { return errors.Is(err, server.ErrClusterNotFound) }

// unreachable names a cluster whose API server address refuses connections.
func unreachable(t testing.TB, name string) *config.NamedConfig {
	t.Helper()
	nc, err := test.Unreachable(name)
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// family returns the series of the metric name in controller-runtime's
// registry, none if it has no series.
func family(t *testing.T, name string) []*dto.Metric {
	t.Helper()
	mfs, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

// label returns the value of a series' label name ("" if it has none).
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// series returns the series of the metric name whose label key has value,
// or nil.
func series(t *testing.T, name, key, value string) *dto.Metric {
	t.Helper()
	for _, m := range family(t, name) {
		if label(m, key) == value {
			return m
		}
	}
	return nil
}

// metricValue reads the value of the counter or gauge name whose label
// key has value (-1: no such series).
func metricValue(t *testing.T, name, key, value string) float64 {
	t.Helper()
	m := series(t, name, key, value)
	switch {
	case m == nil:
		return -1
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}
