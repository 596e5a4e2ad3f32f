package member

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/conversion"

	mccrconfig "github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/credential"
	"github.com/mccr-dev/mccr/internal/leaninformer"
	"github.com/mccr-dev/mccr/internal/reach"
	"github.com/mccr-dev/mccr/internal/syncinformer"
)

var (
	// ErrStarted is returned by a second Start.
	ErrStarted = errors.New("member manager already started")
	// ErrStopped is returned by Add after the Manager stopped.
	ErrStopped = errors.New("member manager stopped")
	// ErrShutdownTimeout is returned by Start when runnables did not return
	// within the graceful shutdown timeout. They go on stopping in the
	// background.
	ErrShutdownTimeout = errors.New("member manager: runnables did not stop in time")
	// ErrHostOnly is returned by calls that only the host Manager serves:
	// health and ready checks and metrics handlers. Register those on the
	// Server's host Manager.
	ErrHostOnly = errors.New("served by the host Manager only; register it on the Server's host Manager")
)

// DefaultGracefulShutdownTimeout is controller-runtime's default, used when
// Options.GracefulShutdownTimeout is nil.
const DefaultGracefulShutdownTimeout = 30 * time.Second

// DefaultControllerCacheSyncTimeout is the CacheSyncTimeout of a member's
// controllers when Options.Controller leaves it zero: no bound.
//
// controller-runtime's own default (2m) bounds each source's start and
// sync, waiting for its kind included, and the controller fails its
// Manager once it passes; here that would restart a member whose cluster
// lacks one CRD, every controller of it, again and again. A member's
// controllers wait for their kinds instead (see WaitingKinds), for as long
// as the member lives. A source that cannot sync for another reason is
// bounded by WaitForSync instead, which the Server bounds by its own
// CacheSyncTimeout: it waits for every controller not waiting for its
// kind. (A controller added once the member is Ready is waited for by
// nobody: its informer retries a failing list for as long as it fails,
// reporting each failure to the watch error handler, and the controller
// starts when it succeeds.) A CacheSyncTimeout set in the options is
// kept, and then also bounds the wait for a kind.
const DefaultControllerCacheSyncTimeout = time.Duration(math.MaxInt64)

// Options configures a Manager. Defaults are filled in by New, in one place.
type Options struct {
	// Logger is returned by GetLogger; controllers derive theirs from it.
	Logger logr.Logger
	// Controller holds the defaults for controllers built on this Manager.
	Controller config.Controller
	// BaseContext provides the context runnables (and so Reconcile) get.
	// Defaults to context.Background.
	BaseContext func() context.Context
	// GracefulShutdownTimeout bounds how long Start waits for runnables to
	// return after its context ends, with controller-runtime's meaning:
	// nil is the default (30s), zero does not wait, negative waits for as
	// long as it takes.
	GracefulShutdownTimeout *time.Duration
	// Elected, when set, is what Elected returns, and the runnables that
	// need leader election (controllers among them) start only once it is
	// closed: a member of a Server that does not lead yet runs its caches,
	// warm-ups and the runnables that need no leader election, as a
	// controller-runtime Manager does on a standby. Nil: closed from the
	// start (the member runs only while this replica may run it at all).
	Elected <-chan struct{}
	// Reconciled, when set, is called after every Reconcile of the
	// controllers added to the Manager (those controller-runtime builds
	// for reconcile.Request: the builder's, controller.New's; see
	// observe.go), with the controller's name, the outcome as
	// controller-runtime's controller_runtime_reconcile_total labels it
	// (ResultSuccess, ResultError, ResultRequeue or ResultRequeueAfter; a
	// panic is an error) and how long the reconciler took. Called on the
	// reconciling goroutine: keep it quick.
	Reconciled func(controller, result string, took time.Duration)
}

// ShutdownTimeout resolves a GracefulShutdownTimeout option: how long to
// wait, and whether to wait without bound.
func ShutdownTimeout(d *time.Duration) (timeout time.Duration, forever bool) {
	switch {
	case d == nil:
		return DefaultGracefulShutdownTimeout, false
	case *d < 0:
		return 0, true
	}
	return *d, false
}

// warmupRunnable is what controllers with EnableWarmup implement: Warmup
// starts their sources and returns once those have synced.
type warmupRunnable interface {
	Warmup(context.Context) error
}

// hasCache is a runnable with a cache of its own (a cluster.Cluster added
// to the Manager); it starts with the caches, as in controller-runtime.
type hasCache interface {
	GetCache() cache.Cache
}

// group orders runnables as controller-runtime's Manager starts them.
type group int

const (
	groupCaches group = iota // runnables with a cache of their own
	groupOthers              // NeedLeaderElection() == false
	groupMain                // controllers and every other runnable
	groups
)

func groupOf(r manager.Runnable) group {
	switch r := r.(type) {
	case hasCache:
		return groupCaches
	case manager.LeaderElectionRunnable:
		if !r.NeedLeaderElection() {
			return groupOthers
		}
	}
	return groupMain
}

// Manager runs a Cluster and the runnables added to it. See the package
// documentation.
type Manager struct {
	cluster.Cluster
	opts       Options
	converters conversion.Registry
	elected    <-chan struct{}
	warned     sync.Map // host-only calls already logged

	// waiting are the kinds warm-ups wait for; written by the cache.
	waiting *kindSet
	// unserved are the kinds the member does not serve (nil without Build).
	unserved *unservedKinds
	// kinds tells OnKindsChanged's function that waiting or unserved
	// changed (nil without Build).
	kinds *kindsHook
	// writes are the member's writes in flight, which its stop waits for
	// (bounded by their grace; nil without Build).
	writes *writesInFlight
	// creds holds the credentials the member sends (nil: its config's own).
	creds *credential.Holder

	mu      sync.Mutex
	pending [groups][]pendingRunnable
	warmups []*warmup       // of the runnables with a warm-up
	state   int             // 0 new, 1 running, 2 stopped
	ctx     context.Context // runnables' context while running
	end     context.CancelFunc
	errs    chan error
	wg      sync.WaitGroup
	stopped chan struct{} // closed once every runnable and the cache returned
}

var _ manager.Manager = &Manager{}

type pendingRunnable struct {
	r  manager.Runnable
	wu *warmup
}

// warmup follows a runnable's warm-up for WaitForSync.
type warmup struct {
	synced chan struct{} // closed once it finished
	waiter *waiter       // whether a source of it waits for its kind
}

// wait returns true once the warm-up finished or one of its sources waits
// for its kind, false if ctx ends first.
func (w *warmup) wait(ctx context.Context) bool {
	for {
		waiting, changed := w.waiter.state()
		if waiting {
			return true
		}
		select {
		case <-w.synced:
			return true
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// New returns a Manager around cl.
func New(cl cluster.Cluster, opts Options) *Manager {
	if opts.BaseContext == nil {
		opts.BaseContext = context.Background
	}
	// WaitForSync learns that a controller has synced from its warm-up,
	// so warm-up is always on. As in controller-runtime, warm-up starts
	// the sources before the election is won (Options.Elected), so a
	// member of a standby syncs every cache its controllers read. (A
	// controller built with warm-up off in its own options counts as
	// synced as soon as it starts.)
	opts.Controller.EnableWarmup = ptr.To(true)
	if opts.Controller.CacheSyncTimeout == 0 {
		opts.Controller.CacheSyncTimeout = DefaultControllerCacheSyncTimeout
	}
	elected := opts.Elected
	if elected == nil {
		ch := make(chan struct{})
		close(ch)
		elected = ch
	}
	return &Manager{
		Cluster:    cl,
		opts:       opts,
		converters: conversion.NewRegistry(),
		elected:    elected,
		errs:       make(chan error, 1),
		stopped:    make(chan struct{}),
	}
}

// BuildOptions configures Build.
type BuildOptions struct {
	Options
	// Cluster adjusts the controller-runtime cluster options (scheme,
	// cache, client, mapper) after Build has set its own defaults.
	Cluster func(*cluster.Options)
	// Lifetime ends when the member stops or restarts; reads waiting on
	// its cache (an informer that has not synced) return then. Defaults to
	// a context that never ends.
	Lifetime context.Context
	// CompressWatches keeps Go's gzip on watch requests; by default they
	// ask for an uncompressed stream (see plainWatches).
	CompressWatches bool
	// ClientGoInformers builds informers with client-go's constructor when
	// the cluster options name none; by default they are leaninformer's.
	ClientGoInformers bool
	// Reach, when set, watches the member's connection to its API server
	// (cfg reports its requests to it already: reach.New wraps it); its
	// WatchError is told every failed list and watch of the member's
	// informers, after the cache options' own handler. The member's
	// requests go through its HTTPClient, on the connections of its check
	// and probes.
	Reach *reach.Monitor
	// Credentials, when set, holds the credentials cfg's clients send
	// (Install took them out of cfg); GetConfig names them.
	Credentials *credential.Holder
	// Scope is the part of the cluster the member watches (see scope.go);
	// the zero value is the whole cluster. ScopeSource names where it
	// came from ("Secret argocd/cluster-x"), for reports.
	Scope       mccrconfig.Scope
	ScopeSource string
}

// Build creates the Cluster of a member from cfg and the Manager around
// it. Its cache tells WaitForSync by notification when it has synced, and
// holds reads made before it started until it has.
func Build(cfg *rest.Config, opts BuildOptions) (*Manager, error) {
	lifetime := opts.Lifetime
	if lifetime == nil {
		lifetime = context.Background()
	}
	if err := opts.Scope.Validate(); err != nil {
		return nil, fmt.Errorf("scope from %s: %w", opts.ScopeSource, err)
	}
	// Every report of kinds tells kinds when it changes (OnKindsChanged).
	kinds := &kindsHook{}
	forbidden := syncinformer.NewKinds()
	forbidden.OnChange(kinds.changed)
	unserved := newUnservedKinds(forbidden, opts.Scope, opts.ScopeSource, opts.Logger)
	unserved.hook = kinds
	waiting := newKindSet()
	waiting.hook = kinds
	writes := newWritesInFlight(writeGrace(opts.GracefulShutdownTimeout))
	var base *http.Client // built from cfg by httpClients
	if opts.Reach != nil {
		base = opts.Reach.HTTPClient()
	}
	memberHC, mapperHC, err := httpClients(lifetime, cfg, base, opts.CompressWatches, writes)
	if err != nil {
		return nil, fmt.Errorf("creating HTTP client: %w", err)
	}
	// The closures the member keeps (its cache's handlers) capture what
	// they use, never opts: opts.Cluster, for one, holds what only the
	// build needs (a Server's start check passes its core resource list
	// that way), and would live as long as the member.
	reachMon, logger := opts.Reach, opts.Logger
	cl, err := cluster.New(cfg, func(co *cluster.Options) {
		co.Logger = opts.Logger
		co.HTTPClient = memberHC
		if opts.Cluster != nil {
			opts.Cluster(co)
		}
		clientOptions(lifetime, co)
		if mp := co.MapperProvider; mp != nil {
			co.MapperProvider = func(c *rest.Config, _ *http.Client) (meta.RESTMapper, error) { return mp(c, mapperHC) }
		}
		newInformer := co.Cache.NewInformer
		if newInformer == nil && !opts.ClientGoInformers {
			newInformer = leaninformer.New
		}
		co.Cache.NewInformer = syncinformer.Wrap(lifetime.Done(), newInformer, forbidden)
		next := co.Cache.DefaultWatchErrorHandler
		if next == nil {
			next = toolscache.DefaultWatchErrorHandler
		}
		co.Cache.DefaultWatchErrorHandler = func(ctx context.Context, r *toolscache.Reflector, err error) {
			if lifetime.Err() != nil {
				// The member is stopping: its informers' requests are cut
				// or refused (lifetimeTransport) until its cache stops.
				return
			}
			if apierrors.IsForbidden(err) {
				forbidden.Forbid(r.TypeDescription())
			}
			next(ctx, r, err)
			if reachMon != nil {
				reachMon.WatchError(err)
			}
		}
		co.NewCache = newSyncNotifyingCache(lifetime, scopedNewCache(lifetime, co.NewCache, unserved), forbidden, waiting, logger)
	})
	if err != nil {
		return nil, fmt.Errorf("creating cluster: %w", err)
	}
	m := New(cl, opts.Options)
	m.waiting = waiting
	m.writes = writes
	m.creds = opts.Credentials
	m.unserved = unserved
	m.kinds = kinds
	return m, nil
}

// Add runs r: when the Manager starts, or at once if it runs already.
func (m *Manager) Add(r manager.Runnable) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch m.state {
	case 0, 1:
	default:
		return ErrStopped
	}
	if m.opts.Reconciled != nil {
		observeReconciles(r, m.opts.Reconciled)
	}
	if m.state == 0 {
		g := groupOf(r)
		m.pending[g] = append(m.pending[g], pendingRunnable{r, m.trackLocked(r)})
	} else {
		m.launchLocked(r, m.trackLocked(r))
	}
	return nil
}

func (m *Manager) trackLocked(r manager.Runnable) *warmup {
	if _, ok := r.(warmupRunnable); !ok {
		return nil
	}
	wu := &warmup{synced: make(chan struct{}), waiter: newWaiter()}
	wu.waiter.waiting, wu.waiter.unserved = m.waiting, m.unserved
	m.warmups = append(m.warmups, wu)
	return wu
}

// launchLocked starts r in its own goroutine: warm-up (if r has one), then,
// for a runnable that needs leader election, the wait for Elected, then
// Start. Called with m.mu held while running. The warm-up's ctx carries
// the runnable's waiter, so that its sources wait for kinds the cluster
// does not serve yet (latekind.go); Start's does not, as it reaches
// Reconcile. As in controller-runtime, warm-ups do not wait for the
// election: a standby's controllers have their sources synced when it
// comes to lead.
func (m *Manager) launchLocked(r manager.Runnable, wu *warmup) {
	ctx := m.ctx
	elected := m.elected
	if groupOf(r) != groupMain {
		elected = nil
	}
	m.wg.Go(func() {
		if w, ok := r.(warmupRunnable); ok {
			if err := w.Warmup(withWaiter(ctx, wu.waiter)); err != nil {
				if ctx.Err() == nil {
					m.fail(fmt.Errorf("warming up %T: %w", r, err))
				}
				return
			}
			close(wu.synced)
		}
		if elected != nil {
			select {
			case <-elected:
			case <-ctx.Done():
				return
			}
		}
		if err := r.Start(ctx); err != nil {
			m.fail(err)
		}
	})
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
//
// Runnables start in controller-runtime's order: once the cache has started
// and synced the informers that exist by then (field indexes), those with a
// cache of their own (each waited for), then those that need no leader
// election, then the rest, controllers among them.
func (m *Manager) Start(ctx context.Context) error {
	runCtx, stopRunnables := context.WithCancel(m.opts.BaseContext())
	defer stopRunnables()
	cacheCtx, stopCache := context.WithCancel(context.Background())
	defer stopCache()
	// endCtx ends when ctx does or a runnable fails; the shutdown then runs
	// in the goroutine AfterFunc starts for it.
	endCtx, end := context.WithCancel(ctx)
	defer end()
	// Every wg.Add happens under m.mu while the state is running, and the
	// shutdown sets it to stopped under m.mu before it waits: no Add can
	// race the Wait.
	m.mu.Lock()
	if m.state != 0 {
		m.mu.Unlock()
		return ErrStarted
	}
	m.state, m.ctx, m.end = 1, runCtx, end
	m.wg.Add(1) // startInOrder
	m.mu.Unlock()

	timeout, forever := ShutdownTimeout(m.opts.GracefulShutdownTimeout)
	var shutdownErr error
	shutdownDone := make(chan struct{})
	unhook := context.AfterFunc(endCtx, func() {
		defer close(shutdownDone)
		m.mu.Lock()
		m.state = 2
		m.mu.Unlock()
		stopRunnables()
		switch {
		case forever:
			m.wg.Wait()
		case timeout == 0:
			// controller-runtime's "do not wait": no error either.
		case !waitTimeout(&m.wg, timeout):
			shutdownErr = ErrShutdownTimeout
		}
		stopCache()
	})
	defer unhook()

	cacheDone := make(chan error, 1)
	cacheStopped := make(chan struct{})
	go func() {
		defer close(cacheStopped)
		cacheDone <- m.Cluster.Start(cacheCtx)
	}()
	defer func() {
		// Runnables and a cache that outlived the graceful shutdown
		// timeout still count: the Manager has stopped only once they
		// return.
		go func() {
			m.wg.Wait()
			<-cacheStopped
			m.writes.wait()
			close(m.stopped)
		}()
	}()
	go func() {
		defer m.wg.Done()
		m.startInOrder(runCtx)
	}()
	var cacheErr error
	select {
	case cacheErr = <-cacheDone:
		end() // the cache stopped by itself (an error)
		<-shutdownDone
	case <-endCtx.Done():
		<-shutdownDone
		// The cache was told to stop; like controller-runtime, wait for it
		// only as long as the graceful shutdown timeout allows.
		cacheErr = m.waitCache(cacheDone, timeout, forever)
	}
	var err error
	select {
	case err = <-m.errs:
	default:
	}
	switch {
	case errors.Is(cacheErr, ErrShutdownTimeout):
		if shutdownErr == nil {
			shutdownErr = ErrShutdownTimeout
		}
	case cacheErr != nil && cacheCtx.Err() == nil:
		err = errors.Join(err, fmt.Errorf("cache: %w", cacheErr))
	}
	return errors.Join(err, shutdownErr)
}

// startInOrder launches the pending runnables group by group, each group
// once the one before may run: the Manager's cache and the runnables with a
// cache have synced. Runnables added while it works are launched at once
// (state is running), as controller-runtime does for late additions.
func (m *Manager) startInOrder(ctx context.Context) {
	if !m.Cluster.GetCache().WaitForCacheSync(ctx) {
		return
	}
	for g := range groups {
		m.mu.Lock()
		if m.state != 1 {
			m.mu.Unlock()
			return
		}
		batch := m.pending[g]
		m.pending[g] = nil
		for _, p := range batch {
			m.launchLocked(p.r, p.wu)
		}
		m.mu.Unlock()
		if g != groupCaches {
			continue
		}
		for _, p := range batch {
			if !p.r.(hasCache).GetCache().WaitForCacheSync(ctx) {
				return
			}
		}
	}
}

// waitCache waits for the cache to return after it was told to stop.
func (m *Manager) waitCache(done <-chan error, timeout time.Duration, forever bool) error {
	if forever {
		return <-done
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		if timeout == 0 {
			return nil
		}
		return ErrShutdownTimeout
	}
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

// Stopped is closed once Start has returned and every runnable has
// returned too, including those that outlived the graceful shutdown
// timeout, and no write of the member is in flight any more (each gets its
// answer or is cut within its grace; see writeRoundTrip).
func (m *Manager) Stopped() <-chan struct{} { return m.stopped }

// WaitForSync reports whether the cache and every controller added before
// Start have synced before ctx ends. A controller waiting for a kind the
// cluster does not serve (see WaitingKinds) counts as synced: it is not
// broken, and the member's other controllers need not wait for it.
func (m *Manager) WaitForSync(ctx context.Context) bool {
	if !m.GetCache().WaitForCacheSync(ctx) {
		return false
	}
	m.mu.Lock()
	warmups := m.warmups
	m.mu.Unlock()
	for _, wu := range warmups {
		if !wu.wait(ctx) {
			return false
		}
	}
	// Sync waits also end when the member stops; that is no sync.
	return ctx.Err() == nil
}

// WaitingKinds returns, sorted, the kinds (as schema.GroupVersionKind
// prints them: "example.com/v1, Kind=Widget") that controllers of this
// Manager wait for because the cluster does not serve them, typically a
// CRD not installed there. A controller starts once its kinds are served,
// without a restart. It takes only a leaf lock: callers may hold theirs.
func (m *Manager) WaitingKinds() []string { return m.waiting.list() }

// Elected is Options.Elected, closed from the start when that is nil:
// members elect no leader of their own; their leader-election runnables
// wait for the host Manager's.
func (m *Manager) Elected() <-chan struct{} { return m.elected }

// AddMetricsServerExtraHandler returns ErrHostOnly: metrics are served by
// the host Manager.
func (m *Manager) AddMetricsServerExtraHandler(path string, _ http.Handler) error {
	return fmt.Errorf("AddMetricsServerExtraHandler(%q) on a member cluster's Manager: %w", path, ErrHostOnly)
}

// AddHealthzCheck returns ErrHostOnly: health probes are served by the host
// Manager, and one member's trouble shows in the Server's status instead.
func (m *Manager) AddHealthzCheck(name string, _ healthz.Checker) error {
	return fmt.Errorf("AddHealthzCheck(%q) on a member cluster's Manager: %w", name, ErrHostOnly)
}

// AddReadyzCheck returns ErrHostOnly, like AddHealthzCheck.
func (m *Manager) AddReadyzCheck(name string, _ healthz.Checker) error {
	return fmt.Errorf("AddReadyzCheck(%q) on a member cluster's Manager: %w", name, ErrHostOnly)
}

// GetWebhookServer returns a server that registers nothing: webhooks are
// served once, by the host Manager. The first call, and the first Register
// on it, are logged.
func (m *Manager) GetWebhookServer() webhook.Server {
	m.warnOnce("GetWebhookServer")
	return noWebhooks{m}
}

// warnOnce logs, once per Manager, that a host-only call was made on it.
func (m *Manager) warnOnce(call string) {
	if _, seen := m.warned.LoadOrStore(call, struct{}{}); seen {
		return
	}
	m.opts.Logger.Info("call ignored on a member cluster's Manager: webhooks, health checks and metrics belong to the Server's host Manager", "call", call)
}

// GetLogger returns the member's logger (it carries the cluster name).
func (m *Manager) GetLogger() logr.Logger { return m.opts.Logger }

// GetControllerOptions returns the controller defaults of this member.
func (m *Manager) GetControllerOptions() config.Controller { return m.opts.Controller }

// GetConverterRegistry returns this member's conversion registry.
func (m *Manager) GetConverterRegistry() conversion.Registry { return m.converters }

type noWebhooks struct{ m *Manager }

func (noWebhooks) NeedLeaderElection() bool { return false }
func (w noWebhooks) Register(path string, _ http.Handler) {
	w.m.warnOnce("GetWebhookServer().Register")
}
func (noWebhooks) Start(context.Context) error     { return nil }
func (noWebhooks) StartedChecker() healthz.Checker { return healthz.Ping }
func (noWebhooks) WebhookMux() *http.ServeMux      { return http.NewServeMux() }
