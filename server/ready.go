package server

import (
	"fmt"
	"net/http"

	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// FleetReadyCheck returns a health check, for the host Manager's
// AddReadyzCheck, that passes while at least min members are Ready. The
// Server adds no such check by itself.
func (s *Server) FleetReadyCheck(min int) healthz.Checker {
	return func(*http.Request) error {
		if n := len(s.routes.ReadyClusters()); n < min {
			return fmt.Errorf("%d of at least %d member clusters ready", n, min)
		}
		return nil
	}
}
