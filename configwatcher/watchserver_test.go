package configwatcher_test

import (
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/configwatcher"
	mccrserver "github.com/mccr-dev/mccr/server"
)

// newWatchingServer is a Server on host, serving no metrics or probes,
// fed by w (which it stops if the Server cannot be made). Start it with
// test.Run.
func newWatchingServer(t *testing.T, host *rest.Config, log logr.Logger, w configwatcher.ConfigWatcher) *mccrserver.Server {
	t.Helper()
	srv, err := mccrserver.NewServer(host, ctrl.Options{
		Logger:                 log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		w.Stop()
		t.Fatal(err)
	}
	srv.Watch(w)
	return srv
}
