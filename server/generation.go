package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	crcluster "sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/conntrack"
	"github.com/mccr-dev/mccr/internal/credential"
	"github.com/mccr-dev/mccr/internal/leanmapper"
	membermgr "github.com/mccr-dev/mccr/internal/member"
	"github.com/mccr-dev/mccr/internal/reach"
	"github.com/mccr-dev/mccr/internal/retryafter"
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
	// creds holds the credentials its attempts send (nil when an exec
	// plugin or auth provider supplies them): cfg's at first, an Update's
	// that changes them alone from then on (cluster.swapLocked).
	creds *credential.Holder

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
	return &generation{c: c, cfg: nc, log: c.log, done: make(chan struct{}), creds: credential.New(nc.Config)}
}

// redact is config.RedactErrorFor for an error of this generation's
// member: besides secrets of known shapes, the credentials it started with
// and those it holds now are taken out wherever they appear (an API server
// or a proxy may echo them), and a long message is cut.
func (g *generation) redact(err error) error {
	return config.RedactErrorWith(err, append(config.Credentials(g.cfg.Config), g.creds.Credentials()...)...)
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
		err = g.redact(err)
		if wasReady {
			// Reset whatever ended the attempt: a reconnect too, so that a
			// member that failed a few times as it joined does not keep a
			// long delay for its first failure after a later outage.
			backoff = e.opts.Backoff
		}
		if errors.Is(err, errReconnected) {
			continue
		}
		delay := retryDelay(&backoff)
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

// retryDelay is b's next step, never over its Cap: wait.Backoff adds its
// jitter on top of the cap, so a delay past it is drawn below it instead,
// within the jitter (members that failed together do not retry in step).
func retryDelay(b *wait.Backoff) time.Duration {
	d := b.Step()
	if b.Cap > 0 && d > b.Cap {
		d = b.Cap - time.Duration(rand.Float64()*b.Jitter*float64(b.Cap)) //nolint:gosec // jitter, not a secret
	}
	return max(d, 0)
}

// attempt runs the cluster once, until the generation ends (nil) or the
// attempt fails (the error). wasReady tells whether it got as far as Ready.
func (g *generation) attempt() (wasReady bool, err error) {
	e := g.c.env
	// Unless Options.MaxConcurrentStarts is negative, the start waits its
	// turn for the CPU-heavy part (see startGate), saying so while it
	// waits, and gives its slot back once its caches have synced, or as it
	// ends. A generation stopped meanwhile leaves the queue at once.
	slot, err := e.opts.starts.acquire(g.ctx, func() { g.c.setPhase(g, PhaseQueued, nil) })
	if err != nil {
		return false, nil
	}
	defer slot.release()
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
	// Every client of the attempt, its Check and probes included, sends
	// the generation's credentials of the moment.
	if err := g.creds.Install(cfg); err != nil {
		return false, err
	}
	limitRate(cfg, e.opts)
	// A write answered with a server error is not sent again by client-go
	// (it may have been applied): the fan-out client reports it.
	cfg.Wrap(retryafter.Wrap)
	actx, cancel := context.WithCancel(g.ctx)
	defer cancel()
	end := &stopper{ctx: actx, cancel: cancel}
	// From here on every request of the member reports to mon, which also
	// probes its API server while it runs.
	mon, err := reach.New(cfg, g.c.env.reachOptions(), reachObserver{g: g, end: end})
	if err != nil {
		return false, err
	}
	core, err := mon.Check(g.ctx)
	if err != nil {
		return false, err
	}
	// Answered: a start whose check answered within the slot's first
	// hold keeps its slot for the CPU-heavy rest (see startGate).
	slot.checked()

	mgr, err := g.build(lease, end, mon, core)
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
		synced := mgr.WaitForSync(sctx)
		slot.release() // the CPU-heavy part is over, either way
		if synced {
			ready.Store(true)
			took := time.Since(begin)
			g.c.ready(g, mgr, took)
			g.log.Info("cluster ready", "took", took.Round(time.Millisecond))
			// The attempt waits for its Monitor, which holds no
			// goroutine between probes, to finish.
			end.wg.Add(1)
			mon.Start(actx, end.wg.Done)
			return
		}
		if actx.Err() == nil {
			end.stop(fmt.Errorf("caches not synced within %s: %w", e.opts.CacheSyncTimeout, g.c.lastErrorSince(begin, context.DeadlineExceeded)))
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
// carries what the attempt's helpers need: its context, and a WaitGroup
// the attempt waits on before it returns.
type stopper struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

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
func (g *generation) build(lease *conntrack.Lease, end *stopper, mon *reach.Monitor, core []byte) (*membermgr.Manager, error) {
	o := g.c.env.memberOpts
	name := g.c.name
	// The member's Manager, its controllers and its reconcilers log as a
	// Manager built from the user's options does (the user's logger,
	// controller-runtime's names), with the cluster added; mccr's own
	// lines about the member (g.log) are named "mccr".
	log := o.Logger.WithValues("cluster", name)
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
		Reach:             mon,
		Credentials:       g.creds,
		Scope:             g.cfg.Scope,
		ScopeSource:       g.cfg.Source.String(),
		Options: membermgr.Options{
			Logger:     log,
			Controller: ctrlOpts,
			BaseContext: func() context.Context {
				// The program's own values first (ctrl.Options.BaseContext,
				// as a plain Manager's runnables get them), then the
				// member's logger and name.
				base := context.Background()
				if o.BaseContext != nil {
					base = o.BaseContext()
				}
				return known.WithCluster(logr.NewContext(base, log), name)
			},
			GracefulShutdownTimeout: o.GracefulShutdownTimeout,
			Elected:                 g.elected,
			// The name's series as they are when a reconcile ends: the
			// record's own (held) changes under its lock, which a
			// reconcile does not take.
			Reconciled: clusterSeries{name: name}.reconciled,
		},
		Cluster: func(co *crcluster.Options) {
			co.Scheme = o.Scheme
			co.MapperProvider = o.MapperProvider
			if o.MapperProvider == nil {
				// Names that reach one API server as one user share its
				// mapper, which starts from the probe's core resources.
				co.MapperProvider = lease.MapperProvider(leanmapper.NewWithCore(core))
			}
			co.Cache = o.Cache
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

// funcName is the name of the function f, "(*Reconciler).SetupWithManager"
// for a method value, as the runtime knows it.
func funcName(f func(ctrl.Manager) error) string {
	fn := runtime.FuncForPC(reflect.ValueOf(f).Pointer())
	if fn == nil {
		return "unknown"
	}
	name := fn.Name()
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	return strings.TrimSuffix(name, "-fm")
}
