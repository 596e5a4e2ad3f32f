package server

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/mccr-dev/mccr/internal/fleetsource"
)

// ClusterEventType is what happened to a member.
type ClusterEventType string

const (
	// ClusterReady means the member's caches synced and its controllers run; the
	// fan-out client routes to it.
	ClusterReady ClusterEventType = "Ready"
	// ClusterUnreachable means the member was Ready and its API server stopped
	// answering.
	ClusterUnreachable ClusterEventType = "Unreachable"
	// ClusterFailed means a start failed or the member lost its credentials; it
	// is retried.
	ClusterFailed ClusterEventType = "Failed"
	// ClusterLeft means the member was deleted from the fleet.
	ClusterLeft ClusterEventType = "Left"
	// ClusterElsewhere means, with sharding, that another replica runs the
	// member now (or will): this replica's controllers no longer see it.
	ClusterElsewhere ClusterEventType = "Elsewhere"
)

// ClusterEvent tells a host controller that a member changed.
type ClusterEvent struct {
	// Cluster is the member's name.
	Cluster string
	// Type is what happened.
	Type ClusterEventType
	// Err is why a member is Unreachable or Failed (credentials redacted).
	Err error
}

// ClusterEvents returns a source for a controller on the host Manager that
// calls fn each time a member becomes Ready, Unreachable or Failed, or
// leaves the fleet (or, with sharding, this replica: Elsewhere), and enqueues the requests fn returns — so that a
// controller aggregating over the fleet recomputes when the fleet changes
// instead of polling. When the controller starts, fn is called once for
// every member already Ready, Unreachable or Failed (with sharding, of
// those this replica runs). The ctx fn gets names the member
// (known.ClusterFrom). fn runs in the source's own goroutine, one call at
// a time; a slow fn delays only this source, and is then told each
// member's latest state, not every step it missed: however long fn
// blocks, the source holds one event per member.
//
// An event is told after the fact: by the time fn runs, the fan-out
// client, Status and ClusterNames already show it — a member told Ready is
// served, one told Left is gone from them, one told Unreachable fails a
// fleet-wide List with ErrClusterUnreachable. An aggregator that reads the
// fleet when told (a fleet-wide List, say) reads the new state, not the one
// before. The fleet may have moved on again by then; a later event follows.
func ClusterEvents(srv *Server, fn func(ctx context.Context, ev ClusterEvent) []reconcile.Request) source.Source {
	var feed *fleetsource.Feed
	if srv != nil {
		feed = &srv.feed.Feed
	}
	var told func(context.Context, fleetsource.Member) []reconcile.Request
	if fn != nil {
		told = func(ctx context.Context, m fleetsource.Member) []reconcile.Request {
			ev, ok := clusterEvent(m)
			if !ok {
				return nil
			}
			return fn(ctx, ev)
		}
	}
	return fleetsource.ClusterEvents(feed, told)
}

// clusterEvent is what a member's new state tells a host controller, if
// anything: Pending, Starting, Syncing and Stopping are steps on the way,
// not news.
func clusterEvent(m fleetsource.Member) (ClusterEvent, bool) {
	ev := ClusterEvent{Cluster: m.Name, Err: m.Err}
	switch {
	case m.Left:
		ev.Type, ev.Err = ClusterLeft, nil
	case Phase(m.Phase) == PhaseReady:
		ev.Type, ev.Err = ClusterReady, nil
	case Phase(m.Phase) == PhaseUnreachable:
		ev.Type = ClusterUnreachable
	case Phase(m.Phase) == PhaseFailed:
		ev.Type = ClusterFailed
	case Phase(m.Phase) == PhaseElsewhere:
		ev.Type, ev.Err = ClusterElsewhere, nil
	default:
		return ClusterEvent{}, false
	}
	return ev, true
}
