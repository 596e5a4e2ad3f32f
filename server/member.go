package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/conntrack"
	membermgr "github.com/mccr-dev/mccr/internal/member"
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
	mgr     *membermgr.Manager // the running attempt's Manager, nil between attempts
	applied int                // setups applied to mgr
	end     *stopper           // ends the running attempt
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
	m.s.memberWG.Add(1)
	go func() {
		defer m.s.memberWG.Done()
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
		if errors.Is(err, errReconnected) {
			continue
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
	// The attempt's connections are released when it ends (deferred first,
	// so after the Manager has stopped).
	lease, err := m.s.conns.Acquire(m.cfg.Config)
	if err != nil {
		return false, err
	}
	defer lease.Release()
	cfg := lease.Config
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	end := &stopper{ctx: actx, cancel: cancel, cfg: cfg}
	// client-go retries a refused or reset connection without telling
	// anyone, and open watches outlive revoked credentials for minutes, so
	// every request of the member reports transport errors and 401s.
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &reachTransport{
			next:    rt,
			onError: func(err error) { m.connectionError(err, end) },
			onUnauthorized: func(req *http.Request) {
				end.stop(fmt.Errorf("credentials rejected: %s %s answered 401 Unauthorized", req.Method, req.URL.Path))
			},
		}
	})
	if err := probe(ctx, cfg, m.s.opts.ProbeTimeout); err != nil {
		return false, err
	}

	mgr, err := m.build(lease, end)
	if err != nil {
		return false, err
	}
	defer m.clearManager()

	// Calls aimed at the cluster reach its Manager from now on (its
	// controllers may reconcile before every cache has synced); fleet-wide
	// Lists count it once it is Ready.
	m.s.setRoute(m, mgr.GetClient(), false)
	m.setPhase(PhaseSyncing, nil)
	// The sync watcher lives only until the member is Ready (or the
	// attempt ends); the attempt's own goroutine runs the Manager.
	var ready atomic.Bool
	syncDone := make(chan struct{})
	go func() {
		defer close(syncDone)
		sctx, scancel := context.WithTimeout(actx, m.s.opts.CacheSyncTimeout)
		defer scancel()
		if mgr.WaitForSync(sctx) {
			ready.Store(true)
			m.ready(mgr, time.Since(begin))
			return
		}
		if actx.Err() == nil {
			end.stop(fmt.Errorf("caches not synced within %s: %w", m.s.opts.CacheSyncTimeout, m.lastErrorOr(context.DeadlineExceeded)))
		}
	}()
	err = mgr.Start(actx)
	cancel()
	<-syncDone
	end.wg.Wait()
	m.s.setRoute(m, nil, false)
	switch {
	case ctx.Err() != nil:
		return ready.Load(), nil
	case end.reason() != nil:
		return ready.Load(), end.reason()
	}
	return ready.Load(), managerStopped(err)
}

// stopper ends an attempt early and remembers the first reason. It also
// carries what the attempt's helpers need: its context and config, and a
// WaitGroup the attempt waits on before it returns.
type stopper struct {
	ctx      context.Context
	cancel   context.CancelFunc
	cfg      *rest.Config
	wg       sync.WaitGroup
	watching bool // an outage watch runs; guarded by member.mu

	mu  sync.Mutex
	err error
}

func (s *stopper) stop(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.cancel()
}

func (s *stopper) reason() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func managerStopped(err error) error {
	if err == nil {
		return errors.New("manager stopped unexpectedly")
	}
	return fmt.Errorf("manager stopped: %w", err)
}

// build creates the member's Manager for this attempt and runs every
// reconciler setup on it.
func (m *member) build(lease *conntrack.Lease, end *stopper) (*membermgr.Manager, error) {
	o := m.s.memberOpts
	name, log := m.name, m.log
	userHandler := o.Cache.DefaultWatchErrorHandler
	o.Cache.DefaultWatchErrorHandler = func(ctx context.Context, r *toolscache.Reflector, err error) {
		if userHandler != nil {
			userHandler(ctx, r, err)
		} else {
			toolscache.DefaultWatchErrorHandler(ctx, r, err)
		}
		m.watchError(err, end)
	}
	cl, err := cluster.New(lease.Config, func(co *cluster.Options) {
		co.Scheme = o.Scheme
		co.MapperProvider = o.MapperProvider
		if o.MapperProvider == nil {
			// Names that reach one API server as one user share its mapper.
			co.MapperProvider = lease.MapperProvider(nil)
		}
		co.Logger = log
		co.Cache = o.Cache
		co.NewCache = newSyncNotifyingCache(o.NewCache)
		co.Client = o.Client
		co.NewClient = o.NewClient
	})
	if err != nil {
		return nil, fmt.Errorf("creating cluster: %w", err)
	}
	ctrlOpts := o.Controller
	if ctrlOpts.Logger.GetSink() != nil {
		ctrlOpts.Logger = ctrlOpts.Logger.WithValues("cluster", name)
	} else {
		ctrlOpts.Logger = log
	}
	mgr := membermgr.New(cl, membermgr.Options{
		Logger:     log,
		Controller: ctrlOpts,
		BaseContext: func() context.Context {
			return known.WithCluster(logr.NewContext(context.Background(), log), name)
		},
		GracefulShutdownTimeout: ptr.Deref(o.GracefulShutdownTimeout, 30*time.Second),
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mgr, m.applied, m.end = mgr, 0, end
	if err := m.applySetupsLocked(); err != nil {
		m.mgr, m.end = nil, nil
		return nil, err
	}
	return mgr, nil
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
		m.end.stop(err)
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
func (m *member) watchError(err error, end *stopper) {
	if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
		end.stop(fmt.Errorf("credentials rejected: %w", err))
		return
	}
	m.mu.Lock()
	m.status.LastError = err
	m.mu.Unlock()
	if isConnectionError(err) {
		m.connectionError(err, end)
	}
}

// connectionError starts watching for an outage when a Ready member loses
// its connection to its API server.
func (m *member) connectionError(err error, end *stopper) {
	m.mu.Lock()
	watch := m.status.Phase == PhaseReady && !end.watching
	if watch {
		end.watching = true
	}
	m.mu.Unlock()
	if watch {
		end.wg.Go(func() { m.watchOutage(end) })
	}
}

// reachTransport reports transport errors (no answer at all, as opposed to
// an error answer) of requests that were not cancelled by their caller, and
// answers that reject the credentials. A 403 is not reported: it can be one
// request the user's RBAC forbids, which says nothing about the member.
type reachTransport struct {
	next           http.RoundTripper
	onError        func(error)
	onUnauthorized func(*http.Request)
}

func (r *reachTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	switch {
	case err != nil && req.Context().Err() == nil:
		r.onError(err)
	case err == nil && resp.StatusCode == http.StatusUnauthorized:
		r.onUnauthorized(req)
	}
	return resp, err
}

// WrappedRoundTripper lets client-go's helpers (closing idle connections)
// see through the wrapper.
func (r *reachTransport) WrappedRoundTripper() http.RoundTripper { return r.next }

// errReconnected ends an attempt whose API server answers again after an
// outage. The member restarts at once, with fresh lists, rather than wait
// for client-go's reflectors, whose retry backoff grows to 30s.
var errReconnected = errors.New("API server reachable again; restarting to resync")

// watchOutage probes a Ready member's API server after a connection error.
// If it does not answer, the member is Unreachable until it does, and then
// restarts. A passing blip (the first probe answers) changes nothing.
func (m *member) watchOutage(end *stopper) {
	defer func() {
		m.mu.Lock()
		end.watching = false
		m.mu.Unlock()
	}()
	t := time.NewTicker(m.s.opts.OutageProbeInterval)
	defer t.Stop()
	down := false
	for {
		select {
		case <-end.ctx.Done():
			return
		case <-t.C:
		}
		err := probe(end.ctx, end.cfg, m.s.opts.ProbeTimeout)
		switch {
		case err != nil && !down:
			down = true
			m.setPhase(PhaseUnreachable, err)
			m.s.setUnreachable(m, err)
			clusterReady.WithLabelValues(m.name).Set(0)
			m.log.Error(err, "cluster unreachable; serving from cache until it answers")
		case err == nil && down:
			m.log.Info("cluster reachable again; restarting it to resync")
			end.stop(errReconnected)
			return
		case err == nil:
			return
		}
	}
}

func isConnectionError(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err)
}

func (m *member) clearManager() {
	m.mu.Lock()
	m.mgr, m.end = nil, nil
	m.mu.Unlock()
}

func (m *member) manager() manager.Manager {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mgr == nil || m.status.Phase != PhaseReady {
		return nil
	}
	return m.mgr
}

func (m *member) ready(mgr *membermgr.Manager, took time.Duration) {
	m.mu.Lock()
	m.status.Phase, m.status.Since = PhaseReady, time.Now()
	m.status.LastError, m.status.NextRetry = nil, time.Time{}
	m.status.TimeToReady = took
	m.mu.Unlock()
	m.s.setRoute(m, mgr.GetClient(), true)
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
		if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
			// Discovery is open to every authenticated user: a refusal
			// means the server answered but did not accept who we are.
			return fmt.Errorf("API server %s rejected the credentials: %w", cfg.Host, err)
		}
		return fmt.Errorf("API server %s unreachable: %w", cfg.Host, err)
	}
	return nil
}
