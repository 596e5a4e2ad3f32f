package server

import (
	"context"
	"errors"
	"sync"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/mccr-dev/mccr/known"
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
// every member already Ready, Unreachable or Failed. The ctx fn gets names
// the member (known.ClusterFrom). fn runs in the source's own goroutine,
// one call at a time; a slow fn delays only this source.
//
// An event is told after the fact: by the time fn runs, the fan-out
// client, Status and ClusterNames already show it — a member told Ready is
// served, one told Left is gone from them, one told Unreachable fails a
// fleet-wide List with ErrClusterUnreachable. An aggregator that reads the
// fleet when told (a fleet-wide List, say) reads the new state, not the one
// before. The fleet may have moved on again by then; a later event follows.
func ClusterEvents(srv *Server, fn func(ctx context.Context, ev ClusterEvent) []reconcile.Request) source.Source {
	return &clusterEvents{srv: srv, fn: fn}
}

type clusterEvents struct {
	srv  *Server
	fn   func(context.Context, ClusterEvent) []reconcile.Request
	once sync.Once
}

func (c *clusterEvents) String() string { return "cluster events source" }

// Start follows the fleet until ctx ends.
func (c *clusterEvents) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	if c.srv == nil || c.fn == nil {
		return errors.New("server.ClusterEvents: the Server and function must not be nil")
	}
	first := false
	c.once.Do(func() { first = true })
	if !first {
		return errSourceStarted
	}
	c.srv.feed.subscribe(ctx, func(st memberState) {
		ev := ClusterEvent{Cluster: st.name, Err: st.err}
		switch {
		case st.left:
			ev.Type, ev.Err = ClusterLeft, nil
		case st.phase == PhaseReady:
			ev.Type, ev.Err = ClusterReady, nil
		case st.phase == PhaseUnreachable:
			ev.Type = ClusterUnreachable
		case st.phase == PhaseFailed:
			ev.Type = ClusterFailed
		case st.phase == PhaseElsewhere:
			ev.Type, ev.Err = ClusterElsewhere, nil
		default:
			return
		}
		for _, req := range c.fn(known.WithCluster(ctx, st.name), ev) {
			q.Add(req)
		}
	}, nil)
	return nil
}
