package cmd

import (
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/mccr-dev/mccr/server"
)

// AddPingChecks adds healthz.Ping as the "healthz" and "readyz" checks of
// srv's host Manager, served at --health-probe-bind-address. It exits the
// program when it cannot.
func AddPingChecks(srv *server.Server) {
	ExitOnError(srv.AddHealthzCheck("healthz", healthz.Ping), "unable to set up health check")
	ExitOnError(srv.AddReadyzCheck("readyz", healthz.Ping), "unable to set up ready check")
}
