package server

import (
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/mccr-dev/mccr/internal/fleetsource"
)

// fleetFeed is the feed the fleet sources (FleetKind, ClusterEvents)
// follow. Cluster records publish to it under their own lock, only once
// the route and Status show what they publish; publishing never blocks
// (see fleetsource.Feed).
type fleetFeed struct{ fleetsource.Feed }

// memberState is a member as a cluster record tells it: its phase and,
// while it runs (Ready or Unreachable), its Manager. left means it was
// deleted from the fleet.
type memberState struct {
	name  string
	phase Phase
	err   error
	mgr   manager.Manager
	left  bool
}

func (f *fleetFeed) publish(st memberState) {
	f.Publish(fleetsource.Member{Name: st.name, Phase: string(st.phase), Err: st.err, Mgr: st.mgr, Left: st.left, Away: st.phase == PhaseElsewhere})
}
