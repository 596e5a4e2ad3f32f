package server

import (
	"errors"
	"fmt"
	"net/http"

	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// FleetReadyCheck returns a health check, for the host Manager's
// AddReadyzCheck, that passes while at least minReady members are Ready. The
// Server adds no such check by itself. A cold standby (Options.ColdStandby,
// a replica that does not lead) runs no member until it leads, and is as
// ready as it will be: the check passes there, so that a rollout that
// waits for new replicas to be ready can go on. So is a sharded replica
// assigned fewer than minReady members: it passes once it has joined and
// those are Ready (none: at once), and fails while it may run none (before
// it joined, its Lease not renewed in time).
func (s *Server) FleetReadyCheck(minReady int) healthz.Checker {
	return func(*http.Request) error {
		if s.coldStandby() {
			return nil
		}
		want := minReady
		if s.shard != nil && minReady > 0 {
			share, ok := s.shard.Share()
			if !ok {
				return errors.New("sharding: this replica has not joined, or may run no cluster now (its Lease not renewed in time)")
			}
			want = min(want, share)
		}
		if n := len(s.routes.ReadyClusters()); n < want {
			return fmt.Errorf("%d of at least %d member clusters ready", n, want)
		}
		return nil
	}
}

// coldStandby says whether this replica keeps its members stopped until
// it leads, and does not lead.
func (s *Server) coldStandby() bool {
	if !(fleetRunnable{s}).NeedLeaderElection() || !s.env.memberOpts.LeaderElection {
		return false
	}
	select {
	case <-s.host.Elected():
		return false
	default:
		return true
	}
}

// SetupReadyCheck returns a health check, for AddReadyzCheck, that fails
// while reconciler setups fail on every member that got as far as running
// them: at least one member's last start failed in a setup (its
// ClusterStatus.LastError wraps ErrSetupFailed) and no member has passed
// its setups (Syncing, Ready or Unreachable). That is a fault of the
// program, or of something every cluster lacks (a CRD, an RBAC rule), not
// of one cluster: a replica in that state reconciles nothing, and a
// rollout should stop. A setup that fails on some members only, and
// members that cannot be reached, leave the check passing; Status and the
// metric mccr_cluster_setup_errors_total tell of those. The error names
// one failing member and its (redacted) error. Like FleetReadyCheck, the
// Server adds no such check by itself.
func (s *Server) SetupReadyCheck() healthz.Checker {
	return func(*http.Request) (err error) {
		s.withStatuses(func(statuses []ClusterStatus) { err = setupsFailing(statuses) })
		return err
	}
}

// setupsFailing is SetupReadyCheck's verdict on statuses.
func setupsFailing(statuses []ClusterStatus) error {
	failing := 0
	var first ClusterStatus
	for _, st := range statuses {
		switch st.Phase {
		case PhaseSyncing, PhaseReady, PhaseUnreachable:
			return nil // its setups passed
		case PhaseFailed, PhaseQueued, PhaseStarting:
			// Queued, Starting: a retry of a member whose setups
			// failed before; it counts as failing until it passes them.
			if errors.Is(st.LastError, ErrSetupFailed) {
				if failing == 0 {
					first = st
				}
				failing++
			}
		case PhasePending, PhaseStopping, PhaseStopped, PhaseElsewhere:
			// Not running here, or not yet: neither way.
		}
	}
	if failing == 0 {
		return nil
	}
	return fmt.Errorf("reconciler setups fail on every member cluster that ran them (%d); cluster %q: %w", failing, first.Name, first.LastError)
}
