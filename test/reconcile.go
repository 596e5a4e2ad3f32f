package test

import (
	"context"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/known"
)

// FirstReconcile is a reconciler that tells when it has first run in each
// cluster. A cluster's Ready status says its caches are synced; the first
// Reconcile says its controllers are running, the moment that matters to a
// test or benchmark of how soon a cluster added to a Server is at work.
// Register it for any kind (objects must exist for it to run). The zero
// value is ready to use.
type FirstReconcile struct {
	mu   sync.Mutex
	seen map[string]chan struct{}
}

// Seen returns a channel closed once Reconcile has run in the named
// cluster. It may be called before the cluster exists.
func (f *FirstReconcile) Seen(cluster string) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.channel(cluster)
}

// Reconcile records that it ran in the cluster ctx names and does nothing
// else.
func (f *FirstReconcile) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	name, _ := known.ClusterFrom(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := f.channel(name)
	select {
	case <-ch:
	default:
		close(ch)
	}
	return reconcile.Result{}, nil
}

// channel is the cluster's channel; f.mu must be held.
func (f *FirstReconcile) channel(cluster string) chan struct{} {
	if f.seen == nil {
		f.seen = map[string]chan struct{}{}
	}
	ch, ok := f.seen[cluster]
	if !ok {
		ch = make(chan struct{})
		f.seen[cluster] = ch
	}
	return ch
}
