package fleetsource

import (
	"context"
	"errors"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/mccr-dev/mccr/known"
)

// ClusterEvents returns a source for a host controller that calls fn with
// every member state the feed tells (those there when the controller
// starts, then each change) and enqueues the requests it returns (see
// server.ClusterEvents, which turns states into ClusterEvents). The ctx fn
// gets names the member; fn runs in the subscription's goroutine, one call
// at a time, so a slow fn delays only this source.
func ClusterEvents(feed *Feed, fn func(context.Context, Member) []reconcile.Request) source.Source {
	return &clusterEvents{feed: feed, fn: fn}
}

type clusterEvents struct {
	feed *Feed
	fn   func(context.Context, Member) []reconcile.Request
	once startOnce
}

func (c *clusterEvents) String() string { return "cluster events source" }

// Start follows the fleet until ctx ends.
func (c *clusterEvents) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	if c.feed == nil || c.fn == nil {
		return errors.New("server.ClusterEvents: the Server and function must not be nil")
	}
	if err := c.once.first(); err != nil {
		return err
	}
	c.feed.Subscribe(ctx, func(m Member) {
		for _, req := range c.fn(known.WithCluster(ctx, m.Name), m) {
			q.Add(req)
		}
	}, nil)
	return nil
}
