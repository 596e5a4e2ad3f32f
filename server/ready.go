package server

import (
	"fmt"
	"net/http"

	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// FleetReadyCheck returns a health check, for the host Manager's
// AddReadyzCheck, that passes while at least minReady members are Ready. The
// Server adds no such check by itself.
func (s *Server) FleetReadyCheck(minReady int) healthz.Checker {
	return func(*http.Request) error {
		if n := len(s.routes.ReadyClusters()); n < minReady {
			return fmt.Errorf("%d of at least %d member clusters ready", n, minReady)
		}
		return nil
	}
}
