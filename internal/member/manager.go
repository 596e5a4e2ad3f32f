// Package member provides the ctrl.Manager a member cluster runs.
//
// controller-runtime's Manager is built to be the one Manager of a process:
// it runs eight runnable groups, leader election, metrics, health probes,
// pprof and a webhook server, and polls its caches while starting. A member
// of a fleet needs none of that (the host Manager does it once), and a
// fleet of a hundred members pays for every goroutine and every millisecond
// a hundred times. This Manager is a controller-runtime Cluster (cache,
// clients, event recorders) plus the runnables that reconciler setups add,
// each started in one goroutine, and nothing else. It implements
// manager.Manager, so setups written for controller-runtime run unchanged.
package member

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/conversion"
)

var (
	// ErrStarted: Start was called twice.
	ErrStarted = errors.New("member manager already started")
	// ErrStopped: Add after the Manager stopped.
	ErrStopped = errors.New("member manager stopped")
	// ErrShutdownTimeout: runnables did not return within the graceful
	// shutdown timeout. They go on stopping in the background.
	ErrShutdownTimeout = errors.New("member manager: runnables did not stop in time")
)

// Options configures a Manager.
type Options struct {
	// Logger is returned by GetLogger; controllers derive theirs from it.
	Logger logr.Logger
	// Controller holds the defaults for controllers built on this Manager.
	Controller config.Controller
	// BaseContext provides the context runnables (and so Reconcile) get.
	// Defaults to context.Background.
	BaseContext func() context.Context
	// GracefulShutdownTimeout bounds how long Start waits for runnables to
	// return after its context ends. Defaults to 30s.
	GracefulShutdownTimeout time.Duration
}

// warmupRunnable is what controllers with EnableWarmup implement: Warmup
// starts their sources and returns once those have synced.
type warmupRunnable interface {
	Warmup(context.Context) error
}

// Manager runs a Cluster and the runnables added to it. See the package
// documentation.
type Manager struct {
	cluster.Cluster
	opts       Options
	converters conversion.Registry
	elected    chan struct{}

	mu      sync.Mutex
	pending []pendingRunnable
	synced  []chan struct{} // closed when a controller's warm-up finished
	state   int             // 0 new, 1 running, 2 stopped
	ctx     context.Context // runnables' context while running
	end     context.CancelFunc
	errs    chan error
	wg      sync.WaitGroup
}

var _ manager.Manager = &Manager{}

type pendingRunnable struct {
	r      manager.Runnable
	synced chan struct{}
}

// New returns a Manager around cl.
func New(cl cluster.Cluster, opts Options) *Manager {
	if opts.BaseContext == nil {
		opts.BaseContext = context.Background
	}
	if opts.GracefulShutdownTimeout <= 0 {
		opts.GracefulShutdownTimeout = 30 * time.Second
	}
	elected := make(chan struct{})
	close(elected)
	return &Manager{
		Cluster:    cl,
		opts:       opts,
		converters: conversion.NewRegistry(),
		elected:    elected,
		errs:       make(chan error, 1),
	}
}

// Add runs r: when the Manager starts, or at once if it runs already.
func (m *Manager) Add(r manager.Runnable) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch m.state {
	case 0:
		m.pending = append(m.pending, pendingRunnable{r, m.trackLocked(r)})
	case 1:
		m.launchLocked(r, m.trackLocked(r))
	default:
		return ErrStopped
	}
	return nil
}

func (m *Manager) trackLocked(r manager.Runnable) chan struct{} {
	if _, ok := r.(warmupRunnable); !ok {
		return nil
	}
	ch := make(chan struct{})
	m.synced = append(m.synced, ch)
	return ch
}

// launchLocked starts r in its own goroutine: warm-up (if r has one), then
// Start. Called with m.mu held while running.
func (m *Manager) launchLocked(r manager.Runnable, synced chan struct{}) {
	ctx := m.ctx
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if w, ok := r.(warmupRunnable); ok {
			if err := w.Warmup(ctx); err != nil {
				m.fail(fmt.Errorf("warming up %T: %w", r, err))
				return
			}
			if synced != nil {
				close(synced)
			}
		}
		if err := r.Start(ctx); err != nil {
			m.fail(err)
		}
	}()
}

// fail records the first runnable failure and ends the Manager.
func (m *Manager) fail(err error) {
	select {
	case m.errs <- err:
	default:
	}
	m.mu.Lock()
	end := m.end
	m.mu.Unlock()
	if end != nil {
		end()
	}
}

// Start runs the cache and every runnable until ctx ends or one of them
// fails, then stops the runnables (waiting up to the graceful shutdown
// timeout) before the cache, and returns the first failure. The calling
// goroutine is the one that runs the cache.
func (m *Manager) Start(ctx context.Context) error {
	runCtx, stopRunnables := context.WithCancel(m.opts.BaseContext())
	defer stopRunnables()
	cacheCtx, stopCache := context.WithCancel(context.Background())
	defer stopCache()
	// endCtx ends when ctx does or a runnable fails; the shutdown then runs
	// in the goroutine AfterFunc starts for it.
	endCtx, end := context.WithCancel(ctx)
	defer end()
	var shutdownErr error
	shutdownDone := make(chan struct{})
	unhook := context.AfterFunc(endCtx, func() {
		defer close(shutdownDone)
		m.mu.Lock()
		m.state = 2
		m.mu.Unlock()
		stopRunnables()
		if !waitTimeout(&m.wg, m.opts.GracefulShutdownTimeout) {
			shutdownErr = ErrShutdownTimeout
		}
		stopCache()
	})
	defer unhook()

	m.mu.Lock()
	if m.state != 0 {
		m.mu.Unlock()
		return ErrStarted
	}
	m.state, m.ctx, m.end = 1, runCtx, end
	for _, p := range m.pending {
		m.launchLocked(p.r, p.synced)
	}
	m.pending = nil
	m.mu.Unlock()

	cacheErr := m.Cluster.Start(cacheCtx)
	end() // the cache stopped by itself (an error) or because of the shutdown
	<-shutdownDone
	var err error
	select {
	case err = <-m.errs:
	default:
	}
	if cacheErr != nil && cacheCtx.Err() == nil {
		err = errors.Join(err, fmt.Errorf("cache: %w", cacheErr))
	}
	return errors.Join(err, shutdownErr)
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// WaitForSync reports whether the cache and every controller added before
// Start have synced before ctx ends.
func (m *Manager) WaitForSync(ctx context.Context) bool {
	if !m.GetCache().WaitForCacheSync(ctx) {
		return false
	}
	m.mu.Lock()
	synced := m.synced
	m.mu.Unlock()
	for _, ch := range synced {
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// Elected is closed from the start: members elect no leader of their own;
// they run only while the host Manager leads.
func (m *Manager) Elected() <-chan struct{} { return m.elected }

// AddMetricsServerExtraHandler does nothing: metrics are served by the host
// Manager.
func (m *Manager) AddMetricsServerExtraHandler(string, http.Handler) error { return nil }

// AddHealthzCheck does nothing: health probes are served by the host
// Manager, and one member's trouble shows in the Server's status instead.
func (m *Manager) AddHealthzCheck(string, healthz.Checker) error { return nil }

// AddReadyzCheck does nothing, like AddHealthzCheck.
func (m *Manager) AddReadyzCheck(string, healthz.Checker) error { return nil }

// GetWebhookServer returns a server that registers nothing: webhooks are
// served once, by the host Manager.
func (m *Manager) GetWebhookServer() webhook.Server { return noWebhooks{} }

// GetLogger returns the member's logger (it carries the cluster name).
func (m *Manager) GetLogger() logr.Logger { return m.opts.Logger }

// GetControllerOptions returns the controller defaults of this member.
func (m *Manager) GetControllerOptions() config.Controller { return m.opts.Controller }

// GetConverterRegistry returns this member's conversion registry.
func (m *Manager) GetConverterRegistry() conversion.Registry { return m.converters }

type noWebhooks struct{}

func (noWebhooks) NeedLeaderElection() bool        { return false }
func (noWebhooks) Register(string, http.Handler)   {}
func (noWebhooks) Start(context.Context) error     { return nil }
func (noWebhooks) StartedChecker() healthz.Checker { return healthz.Ping }
func (noWebhooks) WebhookMux() *http.ServeMux      { return http.NewServeMux() }
