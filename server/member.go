package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/conntrack"
	"github.com/mccr-dev/mccr/known"
)

// member is one cluster's lifecycle: one context from start to stop, and
// within it a loop of attempts (probe, build Manager, run setups, start,
// wait for sync, run) spaced by backoff. Nothing here holds the Server's
// lock while it waits.
type member struct {
	s    *Server
	name string
	cfg  *config.NamedConfig
	fp   string
	log  logr.Logger
	// after is closed when the previous member of the same name (replaced by
	// Update, or deleted) has stopped; this one starts only then, so two
	// Managers never run for one cluster.
	after <-chan struct{}

	// Guarded by Server.mu.
	started bool
	cancel  context.CancelFunc
	done    chan struct{} // closed when the member has stopped (or never ran)

	mu      sync.Mutex // guards the fields below; never held while waiting
	status  ClusterStatus
	mgr     *memberManager // the running attempt's Manager, nil between attempts
	applied int            // setups applied to mgr
	fail    chan error     // the running attempt's failure signal
}

func newMember(s *Server, nc *config.NamedConfig, fp string, after <-chan struct{}) *member {
	m := &member{
		s: s, name: nc.Name, cfg: nc, fp: fp, after: after,
		log:  s.log.WithValues("cluster", nc.Name),
		done: make(chan struct{}),
	}
	m.status = ClusterStatus{Name: nc.Name, Source: nc.Source, Phase: PhasePending, Since: time.Now()}
	return m
}

// start launches the member under parent. Called with Server.mu held; does
// not block.
func (m *member) start(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	m.started, m.cancel = true, cancel
	m.s.wg.Add(1)
	go func() {
		defer m.s.wg.Done()
		defer close(m.done)
		defer cancel()
		m.run(ctx)
	}()
}

// stop asks the member to stop. Called with Server.mu held; does not block.
// Wait on m.done for the stop to complete.
func (m *member) stop() {
	if !m.started {
		m.started = true // never start it now
		close(m.done)
		return
	}
	m.setPhase(PhaseStopping, nil)
	m.cancel()
}

func (m *member) run(ctx context.Context) {
	if m.after != nil {
		select {
		case <-m.after:
		case <-ctx.Done():
			return
		}
	}
	defer m.setPhase(PhaseStopped, nil)
	backoff := m.s.opts.Backoff
	for first := true; ; first = false {
		if !first {
			m.mu.Lock()
			m.status.Restarts++
			m.mu.Unlock()
			clusterRestarts.WithLabelValues(m.name).Inc()
		}
		wasReady, err := m.attempt(ctx)
		if ctx.Err() != nil {
			return
		}
		if wasReady {
			backoff = m.s.opts.Backoff
		}
		delay := backoff.Step()
		m.failed(err, delay)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// attempt runs the member once, until ctx ends (nil) or it fails (the
// error). wasReady tells whether it got as far as Ready.
func (m *member) attempt(ctx context.Context) (wasReady bool, err error) {
	begin := time.Now()
	m.setPhase(PhaseStarting, nil)
	// Everything this attempt opens is closed when it ends (deferred first,
	// so it runs after the Manager has stopped).
	cfg, conns := conntrack.Wrap(m.cfg.Config)
	defer conns.Close()
	if err := probe(ctx, cfg, m.s.opts.ProbeTimeout); err != nil {
		return false, err
	}

	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := make(chan error, 1)
	mgr, err := m.build(cfg, fail)
	if err != nil {
		return false, err
	}
	defer m.clearManager()

	m.setPhase(PhaseSyncing, nil)
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Manager.Start(actx) }()
	// stopManager cancels the attempt and waits for the Manager to return.
	stopManager := func() error { cancel(); return <-mgrDone }

	syncCtx, syncCancel := context.WithTimeout(actx, m.s.opts.CacheSyncTimeout)
	synced := make(chan bool, 1)
	go func() {
		synced <- mgr.GetCache().WaitForCacheSync(syncCtx) && mgr.synced.wait(syncCtx)
	}()
	select {
	case ok := <-synced:
		syncCancel()
		if !ok {
			_ = stopManager()
			if ctx.Err() != nil {
				return false, nil
			}
			return false, fmt.Errorf("caches not synced within %s: %w", m.s.opts.CacheSyncTimeout, m.lastErrorOr(context.DeadlineExceeded))
		}
	case err := <-mgrDone:
		syncCancel()
		<-synced
		if ctx.Err() != nil {
			return false, nil
		}
		return false, managerStopped(err)
	case err := <-fail:
		syncCancel()
		<-synced
		_ = stopManager()
		return false, err
	}

	m.ready(mgr, time.Since(begin))
	defer m.s.setRoute(m, nil)
	select {
	case err := <-mgrDone:
		if ctx.Err() != nil {
			return true, nil
		}
		return true, managerStopped(err)
	case err := <-fail:
		m.s.setRoute(m, nil)
		_ = stopManager()
		return true, err
	case <-ctx.Done():
		m.s.setRoute(m, nil)
		return true, stopManager()
	}
}

func managerStopped(err error) error {
	if err == nil {
		return errors.New("manager stopped unexpectedly")
	}
	return fmt.Errorf("manager stopped: %w", err)
}

// build creates the member's Manager for this attempt and runs every
// reconciler setup on it.
func (m *member) build(cfg *rest.Config, fail chan error) (*memberManager, error) {
	o := m.s.memberOpts
	o.Logger = m.log
	if o.Controller.Logger.GetSink() != nil {
		o.Controller.Logger = o.Controller.Logger.WithValues("cluster", m.name)
	}
	name, log := m.name, m.log
	o.BaseContext = func() context.Context {
		return known.WithCluster(logr.NewContext(context.Background(), log), name)
	}
	o.NewCache = newSyncNotifyingCache(o.NewCache)
	userHandler := o.Cache.DefaultWatchErrorHandler
	o.Cache.DefaultWatchErrorHandler = func(ctx context.Context, r *toolscache.Reflector, err error) {
		if userHandler != nil {
			userHandler(ctx, r, err)
		} else {
			toolscache.DefaultWatchErrorHandler(ctx, r, err)
		}
		m.watchError(err, fail)
	}
	mgr, err := ctrl.NewManager(cfg, o)
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	mm := &memberManager{Manager: mgr, synced: &syncTracker{}}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mgr, m.applied, m.fail = mm, 0, fail
	if err := m.applySetupsLocked(); err != nil {
		m.mgr, m.fail = nil, nil
		return nil, err
	}
	return mm, nil
}

// applySetupsLocked runs the setups this member's Manager has not seen yet.
// Called with m.mu held, so a setup added while the member builds its
// Manager runs exactly once on it.
func (m *member) applySetupsLocked() error {
	for {
		setup, ok := m.s.setup(m.applied)
		if !ok {
			return nil
		}
		if err := callSetup(setup, m.mgr); err != nil {
			return fmt.Errorf("reconciler setup #%d: %w", m.applied+1, err)
		}
		m.applied++
	}
}

// applyNewSetups runs setups added after the member's Manager was built; a
// failing one fails the member like any other start failure.
func (m *member) applyNewSetups() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mgr == nil {
		return // the next attempt's build runs every setup
	}
	if err := m.applySetupsLocked(); err != nil {
		select {
		case m.fail <- err:
		default:
		}
	}
}

func callSetup(setup func(ctrl.Manager) error, mgr manager.Manager) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return setup(mgr)
}

// watchError sees every failed list/watch of the member's informers. Lost
// credentials fail the member (its Manager could only ever see stale data);
// anything else (a restarting API server, a network blip) is recorded while
// the informers retry by themselves.
func (m *member) watchError(err error, fail chan<- error) {
	if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
		select {
		case fail <- fmt.Errorf("credentials rejected: %w", err):
		default:
		}
		return
	}
	m.mu.Lock()
	m.status.LastError = err
	m.mu.Unlock()
}

func (m *member) clearManager() {
	m.mu.Lock()
	m.mgr, m.fail = nil, nil
	m.mu.Unlock()
}

func (m *member) manager() manager.Manager {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mgr == nil || m.status.Phase != PhaseReady {
		return nil
	}
	return m.mgr.Manager
}

func (m *member) ready(mgr *memberManager, took time.Duration) {
	m.mu.Lock()
	m.status.Phase, m.status.Since = PhaseReady, time.Now()
	m.status.LastError, m.status.NextRetry = nil, time.Time{}
	m.status.TimeToReady = took
	m.mu.Unlock()
	m.s.setRoute(m, mgr.GetClient())
	clusterReady.WithLabelValues(m.name).Set(1)
	clusterTimeToReady.WithLabelValues(m.name).Set(took.Seconds())
	m.log.Info("cluster ready", "took", took.Round(time.Millisecond))
}

func (m *member) failed(err error, retryIn time.Duration) {
	m.mu.Lock()
	m.status.Phase, m.status.Since = PhaseFailed, time.Now()
	m.status.LastError = err
	m.status.NextRetry = time.Now().Add(retryIn)
	m.status.Failures++
	m.mu.Unlock()
	clusterReady.WithLabelValues(m.name).Set(0)
	clusterFailures.WithLabelValues(m.name).Inc()
	m.log.Error(err, "cluster failed; will retry", "retryIn", retryIn.Round(time.Millisecond))
}

func (m *member) setPhase(p Phase, err error) {
	m.mu.Lock()
	if m.status.Phase != p {
		m.status.Phase, m.status.Since = p, time.Now()
	}
	if err != nil {
		m.status.LastError = err
	}
	m.mu.Unlock()
	if p != PhaseReady {
		clusterReady.WithLabelValues(m.name).Set(0)
	}
}

func (m *member) lastErrorOr(def error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.status.LastError != nil {
		return m.status.LastError
	}
	return def
}

func (m *member) snapshot() ClusterStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status
}

// probe checks, before a Manager is built, that the API server answers and
// accepts the credentials: discovery is open to every authenticated user,
// so 401 means bad credentials and a dial error means unreachable. It fails
// fast where a Manager would wait for its cache sync timeout.
func probe(ctx context.Context, cfg *rest.Config, timeout time.Duration) error {
	c := rest.CopyConfig(cfg)
	c.NegotiatedSerializer = serializer.WithoutConversionCodecFactory{CodecFactory: scheme.Codecs}
	rc, err := rest.UnversionedRESTClientFor(c)
	if err != nil {
		return fmt.Errorf("building probe client: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := rc.Get().AbsPath("/api").Do(pctx).Error(); err != nil {
		if apierrors.IsUnauthorized(err) {
			return fmt.Errorf("API server %s rejected the credentials: %w", cfg.Host, err)
		}
		return fmt.Errorf("API server %s unreachable: %w", cfg.Host, err)
	}
	return nil
}
