package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	crcluster "sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/conntrack"
	"github.com/mccr-dev/mccr/internal/leanmapper"
	membermgr "github.com/mccr-dev/mccr/internal/member"
	"github.com/mccr-dev/mccr/internal/safe"
	"github.com/mccr-dev/mccr/known"
)

// generation runs one config of a cluster from start to stop: one context,
// and within it a loop of attempts (probe, build Manager, run setups,
// start, wait for sync, run) spaced by backoff. It reports to its cluster
// record, which ignores it once it is no longer the live generation.
type generation struct {
	c    *cluster
	cfg  *config.NamedConfig
	log  logr.Logger
	done chan struct{} // closed once its last Manager has stopped

	lateMu sync.Mutex
	late   *lateSetups    // the running attempt's, told when setups are added
	lateWG sync.WaitGroup // late setups being applied

	ctx    context.Context
	cancel context.CancelFunc
	// elected holds back its Managers' controllers until the host leads
	// (nil: they start at once).
	elected <-chan struct{}
}

func newGeneration(c *cluster, nc *config.NamedConfig) *generation {
	return &generation{c: c, cfg: nc, log: c.log, done: make(chan struct{})}
}

// begin derives the generation's context; called once, before run.
func (g *generation) begin(parent context.Context, elected <-chan struct{}) {
	g.ctx, g.cancel = context.WithCancel(parent)
	g.elected = elected
}

// stop asks the generation to stop; done closes when it has.
func (g *generation) stop() { g.cancel() }

// stopping reports whether the generation was asked to stop, or its run
// (the host's leadership) ended.
func (g *generation) stopping() bool { return g.ctx.Err() != nil }

// kick tells the running attempt, if any, that setups were added: they
// are applied in a goroutine of their own, so no goroutine waits for
// setups while the member runs.
func (g *generation) kick() {
	g.lateMu.Lock()
	defer g.lateMu.Unlock()
	if g.late != nil {
		g.lateWG.Go(g.late.run)
	}
}

// follow makes l the setups kick applies to (nil: none), applying at
// once those added since its Manager was set up. With nil, it returns once
// no late setup is being applied.
func (g *generation) follow(l *lateSetups) {
	g.lateMu.Lock()
	g.late = l
	if l != nil {
		g.lateWG.Go(l.run)
	}
	g.lateMu.Unlock()
	if l == nil {
		g.lateWG.Wait()
	}
}

// lateSetups applies to one Manager the setups registered after it was
// set up, in order, each once.
type lateSetups struct {
	setups *setupList
	ctx    context.Context // the attempt's: none is applied once it ends
	apply  func(i int, setup func(ctrl.Manager) error) bool

	mu      sync.Mutex
	applied int
}

func (l *lateSetups) run() {
	l.mu.Lock()
	defer l.mu.Unlock()
	setups := l.setups.snapshot()
	for ; l.applied < len(setups) && l.ctx.Err() == nil; l.applied++ {
		if !l.apply(l.applied, setups[l.applied]) {
			return
		}
	}
}

func (g *generation) run() {
	defer close(g.done)
	defer g.c.exited(g)
	defer g.cancel()
	e := g.c.env
	backoff := e.opts.Backoff
	for first := true; ; first = false {
		if !first {
			g.c.restarted(g)
		}
		var wasReady bool
		// The attempt works on a config from outside (a Secret, a file): a
		// panic on it fails this attempt, which is retried like any failure.
		err := safe.Call(g.log, "cluster "+config.QuoteName(g.c.name), func() (err error) {
			wasReady, err = g.attempt()
			return err
		})
		if g.ctx.Err() != nil {
			return
		}
		err = config.RedactError(err)
		if errors.Is(err, errReconnected) {
			continue
		}
		if wasReady {
			backoff = e.opts.Backoff
		}
		delay := backoff.Step()
		g.c.failed(g, err, delay)
		msg := "cluster failed; will retry"
		if errors.Is(err, ErrSetupFailed) {
			// The program's own setup, not the cluster, is at fault: say
			// so, as the retries will fail alike until it is fixed or what
			// it needs (a CRD, a scheme entry, RBAC) appears.
			msg = "reconciler setup failed on this cluster; will retry"
		}
		g.log.Error(err, msg, "retryIn", delay.Round(time.Millisecond))
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-g.ctx.Done():
			t.Stop()
			return
		}
	}
}

// attempt runs the cluster once, until the generation ends (nil) or the
// attempt fails (the error). wasReady tells whether it got as far as Ready.
func (g *generation) attempt() (wasReady bool, err error) {
	e := g.c.env
	begin := time.Now()
	g.c.setPhase(g, PhaseStarting, nil)
	// The attempt's connections are released when it ends (deferred first,
	// so after the Manager has stopped).
	lease, err := e.conns.Acquire(g.cfg.Config)
	if err != nil {
		return false, err
	}
	defer lease.Release()
	cfg := lease.Config
	limitRate(cfg, e.opts)
	actx, cancel := context.WithCancel(g.ctx)
	defer cancel()
	end := &stopper{ctx: actx, cancel: cancel, cfg: cfg}
	// client-go retries a refused or reset connection without telling
	// anyone, and open watches outlive revoked credentials for minutes, so
	// every request of the member reports transport errors and rejected
	// credentials.
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &reachTransport{
			next:    rt,
			onError: func(err error) { g.connectionError(err, end) },
			onRejected: func(req *http.Request, code int) {
				end.stop(fmt.Errorf("credentials rejected: %s %s answered %d %s", req.Method, req.URL.Path, code, http.StatusText(code)))
			},
		}
	})
	core, err := probe(g.ctx, cfg, e.opts.ProbeTimeout)
	if err != nil {
		return false, err
	}

	mgr, err := g.build(lease, end, core)
	if err != nil {
		return false, err
	}
	setups := e.setups.snapshot()
	for i, setup := range setups {
		if err := callSetup(setup, mgr); err != nil {
			return false, &setupError{setup: setupName(i, setup), err: err}
		}
	}

	// Calls aimed at the cluster reach its Manager from now on (reads wait
	// for its cache to start and sync); fleet-wide Lists wait for it too.
	g.c.route(g, mgr.GetClient(), false)
	g.c.setPhase(g, PhaseSyncing, nil)
	var ready atomic.Bool
	syncDone := make(chan struct{})
	go func() {
		defer close(syncDone)
		sctx, scancel := context.WithTimeout(actx, e.opts.CacheSyncTimeout)
		defer scancel()
		if mgr.WaitForSync(sctx) {
			ready.Store(true)
			took := time.Since(begin)
			g.c.ready(g, mgr, took)
			g.log.Info("cluster ready", "took", took.Round(time.Millisecond))
			return
		}
		if actx.Err() == nil {
			end.stop(fmt.Errorf("caches not synced within %s: %w", e.opts.CacheSyncTimeout, g.c.lastErrorOr(context.DeadlineExceeded)))
		}
	}()
	// Setups registered while the member runs are applied by lateSetups,
	// each under no lock, exactly once per Manager; the attempt's own
	// goroutine runs the Manager.
	late := &lateSetups{applied: len(setups), apply: func(i int, setup func(ctrl.Manager) error) bool {
		serr := callSetup(setup, mgr)
		switch {
		case serr == nil:
			return true
		case actx.Err() != nil || errors.Is(serr, membermgr.ErrStopped):
			// The Manager stopped while the setup ran: that, not the
			// setup, is why the attempt ends.
		default:
			end.stop(&setupError{setup: setupName(i, setup), err: serr})
		}
		return false
	}, setups: e.setups, ctx: actx}
	g.follow(late)
	err = mgr.Start(actx)
	// The Manager has stopped: no late setup may start on it any more.
	cancel()
	g.follow(nil)
	if err == nil {
		err = errManagerReturned
	}
	<-syncDone
	end.wg.Wait()
	g.c.route(g, nil, false)
	switch {
	case g.ctx.Err() != nil:
		if errors.Is(err, membermgr.ErrShutdownTimeout) {
			g.log.Info("cluster's Manager did not stop within its graceful shutdown timeout; waiting for it before the name runs again")
		}
		<-mgr.Stopped()
		return ready.Load(), nil
	case end.reason() != nil:
		<-mgr.Stopped()
		return ready.Load(), end.reason()
	}
	<-mgr.Stopped()
	return ready.Load(), managerStopped(err)
}

var errManagerReturned = errors.New("manager returned")

// setupError is a reconciler setup's failure (its error, or its panic) on
// a member's Manager: errors.Is finds both ErrSetupFailed and the setup's
// own error.
type setupError struct {
	setup string // setupName's
	err   error
}

func (e *setupError) Error() string   { return "reconciler setup " + e.setup + ": " + e.err.Error() }
func (e *setupError) Unwrap() []error { return []error{ErrSetupFailed, e.err} }

// setupName names a setup in errors: its position and, when it is a
// method value such as r.SetupWithManager, the method's receiver type.
func setupName(i int, setup func(ctrl.Manager) error) string {
	return fmt.Sprintf("#%d (%s)", i+1, funcName(setup))
}

// stopper ends an attempt early and remembers the first reason. It also
// carries what the attempt's helpers need: its context and config, and a
// WaitGroup the attempt waits on before it returns.
type stopper struct {
	ctx      context.Context
	cancel   context.CancelFunc
	cfg      *rest.Config
	wg       sync.WaitGroup
	watching atomic.Bool // an outage watch runs

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
	if err == nil || errors.Is(err, errManagerReturned) {
		return errors.New("manager stopped unexpectedly")
	}
	return fmt.Errorf("manager stopped: %w", err)
}

// build creates the member's Manager for this attempt.
func (g *generation) build(lease *conntrack.Lease, end *stopper, core []byte) (*membermgr.Manager, error) {
	o := g.c.env.memberOpts
	name := g.c.name
	// The member's Manager, its controllers and its reconcilers log as a
	// Manager built from the user's options does (the user's logger,
	// controller-runtime's names), with the cluster added; mccr's own
	// lines about the member (g.log) are named "mccr".
	log := o.Logger.WithValues("cluster", name)
	userHandler := o.Cache.DefaultWatchErrorHandler
	cacheOpts := o.Cache
	cacheOpts.DefaultWatchErrorHandler = func(ctx context.Context, r *toolscache.Reflector, err error) {
		if userHandler != nil {
			userHandler(ctx, r, err)
		} else {
			toolscache.DefaultWatchErrorHandler(ctx, r, err)
		}
		g.watchError(err, end)
	}
	ctrlOpts := o.Controller
	if ctrlOpts.Logger.GetSink() != nil {
		ctrlOpts.Logger = ctrlOpts.Logger.WithValues("cluster", name)
	} else {
		ctrlOpts.Logger = log
	}
	return membermgr.Build(lease.Config, membermgr.BuildOptions{
		Lifetime:          end.ctx,
		CompressWatches:   g.c.env.opts.CompressWatches,
		ClientGoInformers: g.c.env.opts.ClientGoInformers,
		Options: membermgr.Options{
			Logger:     log,
			Controller: ctrlOpts,
			BaseContext: func() context.Context {
				return known.WithCluster(logr.NewContext(context.Background(), log), name)
			},
			GracefulShutdownTimeout: o.GracefulShutdownTimeout,
			Elected:                 g.elected,
			Reconciled:              g.c.series.reconciled,
		},
		Cluster: func(co *crcluster.Options) {
			co.Scheme = o.Scheme
			co.MapperProvider = o.MapperProvider
			if o.MapperProvider == nil {
				// Names that reach one API server as one user share its
				// mapper, which starts from the probe's core resources.
				co.MapperProvider = lease.MapperProvider(leanmapper.NewWithCore(core))
			}
			co.Cache = cacheOpts
			co.NewCache = o.NewCache
			co.Client = o.Client
			co.NewClient = o.NewClient
		},
	})
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
// credentials (401) fail the member: its Manager could only ever see stale
// data. A 403 is one kind the identity may not read (a missing RBAC rule):
// it is recorded, and the member's other controllers carry on. Anything
// else (a restarting API server, a network blip) is recorded while the
// informers retry by themselves.
func (g *generation) watchError(err error, end *stopper) {
	if apierrors.IsUnauthorized(err) {
		end.stop(fmt.Errorf("credentials rejected: %w", err))
		return
	}
	g.c.recordError(g, err)
	if isConnectionError(err) {
		g.connectionError(err, end)
	}
}

// connectionError starts watching for an outage when a Ready member loses
// its connection to its API server.
func (g *generation) connectionError(_ error, end *stopper) {
	if g.c.phase() != PhaseReady || !end.watching.CompareAndSwap(false, true) {
		return
	}
	end.wg.Go(func() {
		defer end.watching.Store(false)
		g.watchOutage(end)
	})
}

// reachTransport reports transport errors (no answer at all, as opposed to
// an error answer) of requests that were not cancelled by their caller, and
// answers that reject the identity: a 401 anywhere, or a 403 on discovery,
// which every authenticated user may read. A 403 elsewhere is one request
// the user's RBAC forbids, which says nothing about the member.
type reachTransport struct {
	next       http.RoundTripper
	onError    func(error)
	onRejected func(*http.Request, int)
}

func (r *reachTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	switch {
	case err != nil && req.Context().Err() == nil:
		r.onError(err)
	case err != nil:
	case resp.StatusCode == http.StatusUnauthorized,
		resp.StatusCode == http.StatusForbidden && isDiscovery(req.URL.Path):
		// The member stops on a rejection, and its requests end with it:
		// the caller gets the API server's answer read before that, not
		// the cancellation of its read.
		resp.Body = readRejection(resp.Body)
		r.onRejected(req, resp.StatusCode)
	}
	return resp, err
}

// maxRejectionBody bounds what is read of a rejection's body (a Status).
const maxRejectionBody = 64 << 10

// readRejection reads and closes body, and returns what it held.
func readRejection(body io.ReadCloser) io.ReadCloser {
	b, _ := io.ReadAll(io.LimitReader(body, maxRejectionBody))
	_ = body.Close()
	return io.NopCloser(bytes.NewReader(b))
}

// isDiscovery reports whether path is a discovery document: /api, /apis,
// /api/v1, /apis/<group> or /apis/<group>/<version>.
func isDiscovery(path string) bool {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch parts[0] {
	case "api":
		return len(parts) <= 2
	case "apis":
		return len(parts) <= 3
	}
	return false
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
func (g *generation) watchOutage(end *stopper) {
	e := g.c.env
	t := time.NewTicker(e.opts.OutageProbeInterval)
	defer t.Stop()
	down := false
	for {
		select {
		case <-end.ctx.Done():
			return
		case <-t.C:
		}
		_, err := probe(end.ctx, end.cfg, e.opts.ProbeTimeout)
		switch {
		case err != nil && !down:
			down = true
			err = config.RedactError(err)
			g.c.unreachable(g, err)
			g.log.Error(err, "cluster unreachable; serving from cache until it answers")
		case err == nil && down:
			g.log.Info("cluster reachable again; restarting it to resync")
			end.stop(errReconnected)
			return
		case err == nil:
			return
		}
	}
}
