package server

import (
	"net/http"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// The methods below forward to the host Manager, so that a kubebuilder
// main.go moves over by renaming mgr to srv: health and ready checks,
// webhooks, metrics handlers and leader election belong to the process, not
// to a member cluster.

// AddHealthzCheck adds a health check to the host Manager.
func (s *Server) AddHealthzCheck(name string, check healthz.Checker) error {
	return s.host.AddHealthzCheck(name, check)
}

// AddReadyzCheck adds a readiness check to the host Manager. See
// FleetReadyCheck for one that follows the members.
func (s *Server) AddReadyzCheck(name string, check healthz.Checker) error {
	return s.host.AddReadyzCheck(name, check)
}

// GetWebhookServer returns the host Manager's webhook server.
func (s *Server) GetWebhookServer() webhook.Server { return s.host.GetWebhookServer() }

// AddMetricsServerExtraHandler adds a handler to the host Manager's metrics
// server.
func (s *Server) AddMetricsServerExtraHandler(path string, handler http.Handler) error {
	return s.host.AddMetricsServerExtraHandler(path, handler)
}

// Elected is closed when the host Manager is elected leader (at once
// without leader election). Members run on standbys too, their caches
// synced and the fan-out client reading them; their controllers start
// only from then on (and, with Options.ColdStandby, the members too).
func (s *Server) Elected() <-chan struct{} { return s.host.Elected() }

// GetConfig returns the host cluster's rest.Config.
func (s *Server) GetConfig() *rest.Config { return s.host.GetConfig() }
