package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/fakeapi"
	"github.com/mccr-dev/mccr/test"
)

// TestAddRacingStartsEndLeavesNoSeries: an Add that found the Server
// running, and adds its cluster only once Start has returned (and forgot
// its members' series), leaves no series behind, which no Server would
// ever drop: the process's registry would serve them for good.
func TestAddRacingStartsEndLeavesNoSeries(t *testing.T) {
	host := fakeapi.New()
	host.Start()
	t.Cleanup(host.Close)
	srv, err := NewServer(host.Config(), ctrl.Options{
		Logger:  logr.Discard(),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan error, 1)
	go func() { started <- srv.Start(ctx) }()
	test.Eventually(t, 30*time.Second, "the fleet runs", func() bool { return srv.currentRun() != nil })

	// The Add has found the Server running; Start returns before it adds.
	srv.testChecked = func() {
		srv.testChecked = nil
		cancel()
		if err := <-started; err != nil {
			t.Error(err)
		}
	}
	if err := srv.Add(config.NewNamedConfig("late-racer", &rest.Config{Host: "https://127.0.0.1:1"})); err != nil && !errors.Is(err, ErrServerStopped) {
		t.Fatal(err)
	}
	if m := memberSeriesSet.lookup("late-racer"); m != nil {
		memberSeriesSet.release("late-racer")
		t.Error("a cluster added as Start returned has series, which nothing will drop")
	}
}
