package e2e

import (
	"context"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/known"
)

// firstReconcile signals the first Reconcile seen in each cluster.
type firstReconcile struct {
	mu   sync.Mutex
	seen map[string]chan struct{}
}

func (f *firstReconcile) wait(cluster string) chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch, ok := f.seen[cluster]
	if !ok {
		ch = make(chan struct{})
		f.seen[cluster] = ch
	}
	return ch
}

func (f *firstReconcile) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	name, _ := known.ClusterFrom(ctx)
	ch := f.wait(name)
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
	return reconcile.Result{}, nil
}
