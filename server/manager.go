package server

import (
	"context"
	"net/http"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// memberManager is the ctrl.Manager a member hands to reconciler setups. It
// is the member's real Manager, except that it notes every controller added
// so the member can tell when all of them have synced.
type memberManager struct {
	manager.Manager
	synced *syncTracker
}

// warmupRunnable is what controllers implement when EnableWarmup is set: the
// Manager calls Warmup, which starts the controller's sources and returns
// once they have synced.
type warmupRunnable interface {
	manager.Runnable
	manager.LeaderElectionRunnable
	Warmup(context.Context) error
}

func (m *memberManager) Add(r manager.Runnable) error {
	if w, ok := r.(warmupRunnable); ok {
		r = m.synced.track(w)
	}
	return m.Manager.Add(r)
}

// syncTracker waits for the warm-up of every controller added before the
// member started.
type syncTracker struct {
	mu      sync.Mutex
	pending []chan struct{}
}

func (t *syncTracker) track(w warmupRunnable) manager.Runnable {
	done := make(chan struct{})
	t.mu.Lock()
	t.pending = append(t.pending, done)
	t.mu.Unlock()
	return &trackedRunnable{warmupRunnable: w, synced: done}
}

// wait reports whether every tracked controller synced before ctx ended.
func (t *syncTracker) wait(ctx context.Context) bool {
	t.mu.Lock()
	pending := t.pending
	t.mu.Unlock()
	for _, ch := range pending {
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

type trackedRunnable struct {
	warmupRunnable
	once   sync.Once
	synced chan struct{}
}

func (r *trackedRunnable) Warmup(ctx context.Context) error {
	err := r.warmupRunnable.Warmup(ctx)
	if err == nil {
		r.once.Do(func() { close(r.synced) })
	}
	return err
}

// noWebhooks stands in for a member's webhook server. Admission and
// conversion webhooks are served once, by the host Manager (register them
// with Server.GetHostManager()); a setup that registers a webhook on a
// member registers nothing.
type noWebhooks struct{}

func (noWebhooks) NeedLeaderElection() bool        { return false }
func (noWebhooks) Register(string, http.Handler)   {}
func (noWebhooks) Start(context.Context) error     { return nil }
func (noWebhooks) StartedChecker() healthz.Checker { return healthz.Ping }
func (noWebhooks) WebhookMux() *http.ServeMux      { return http.NewServeMux() }
