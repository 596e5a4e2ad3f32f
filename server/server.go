package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	mcclient "github.com/mccr-dev/mccr/client"
	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/internal/conntrack"
	"github.com/mccr-dev/mccr/internal/router"
)

var (
	// ErrClusterNotFound: no cluster of that name. The same error value as
	// the fan-out client's, so errors.Is works across both.
	ErrClusterNotFound = mcclient.ErrClusterNotFound
	// ErrClusterNotReady: the cluster exists but is not Ready.
	ErrClusterNotReady = mcclient.ErrClusterNotReady
	// ErrClusterExists: Add of a known name with a different config. Use
	// Update to change a cluster's config.
	ErrClusterExists = errors.New("cluster already exists with a different config (use Update)")
	// ErrInvalidConfig: a NamedConfig without a name or a rest.Config.
	ErrInvalidConfig = errors.New("invalid cluster config")
	// ErrStopTimeout: a member's Manager did not stop within
	// Options.StopTimeout. It goes on stopping in the background.
	ErrStopTimeout = errors.New("cluster did not stop in time")
	// ErrAlreadyStarted: Start was called twice.
	ErrAlreadyStarted = errors.New("server already started")
)

// Server is a controller-runtime Manager for a fleet: a host Manager that
// owns leader election, metrics, health probes and webhooks, plus one
// Manager per member cluster, each running every registered reconciler
// setup. See the package documentation.
type Server struct {
	host        manager.Manager
	releaseHost func()
	// conns shares connections among members (and the host) that reach the
	// same API server, and closes them when the last one stops.
	conns      conntrack.Pool
	memberOpts ctrl.Options
	opts       Options
	log        logr.Logger
	routes     router.Table
	client     *mcclient.Client

	mu       sync.Mutex
	members  map[string]*member
	prev     map[string]<-chan struct{} // done of the last stopped member of a name
	setups   []func(ctrl.Manager) error
	runCtx   context.Context // set while the host Manager leads
	started  bool
	stopped  bool
	watchers []configwatcher.ConfigWatcher
	werrs    watchErrors
	watchWG  sync.WaitGroup

	wg       sync.WaitGroup // the fleet runnable
	memberWG sync.WaitGroup // every member goroutine
}

// NewServer creates a Server whose host Manager runs against cfg with the
// given options, exactly as ctrl.NewManager(cfg, opts) would. The same
// options (minus metrics, probes, webhooks, pprof and leader election)
// shape every member's Manager: scheme, cache, client, controller defaults,
// logger.
func NewServer(cfg *rest.Config, opts ctrl.Options, options ...Option) (*Server, error) {
	if cfg == nil {
		return nil, errors.New("server: host config is nil")
	}
	opts = hostOptions(opts)
	s := &Server{members: map[string]*member{}, prev: map[string]<-chan struct{}{}}
	lease, err := s.conns.Acquire(cfg)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	host, err := ctrl.NewManager(lease.Config, opts)
	if err != nil {
		lease.Release()
		return nil, fmt.Errorf("server: creating host manager: %w", err)
	}
	var o Options
	for _, f := range options {
		f(&o)
	}
	o.defaults(opts.GracefulShutdownTimeout)
	registerMetrics()
	s.host, s.releaseHost = host, lease.Release
	s.memberOpts, s.opts = memberOptions(opts), o
	s.log = opts.Logger.WithName("mccr")
	s.client = mcclient.New(&s.routes, mcclient.Options{Scheme: host.GetScheme(), RESTMapper: host.GetRESTMapper()})
	if err := host.Add(fleetRunnable{s}); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	return s, nil
}

// Add adds a member cluster. It never touches the network: the cluster is
// started in the background (at once if the Server runs and leads, else
// when it does) and its progress shows in Status. Adding the same name with
// the same config again is a no-op; with a different config it is
// ErrClusterExists.
func (s *Server) Add(nc *config.NamedConfig) error {
	if err := validate(nc); err != nil {
		return err
	}
	fp := nc.Fingerprint()
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.members[nc.Name]; ok {
		if old.fp == fp {
			return nil
		}
		return fmt.Errorf("cluster %q: %w", nc.Name, ErrClusterExists)
	}
	s.addLocked(nc, fp)
	s.log.Info("cluster added", "cluster", nc.Name, "source", nc.Source.String())
	return nil
}

// Update replaces a member's config. The same config again is a no-op; a
// changed one stops that member's Manager and starts a new one with the new
// config, leaving every other member alone. Update returns once the old
// Manager has stopped (at most Options.StopTimeout).
func (s *Server) Update(nc *config.NamedConfig) error {
	if err := validate(nc); err != nil {
		return err
	}
	fp := nc.Fingerprint()
	s.mu.Lock()
	old, ok := s.members[nc.Name]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("cluster %q: %w", nc.Name, ErrClusterNotFound)
	}
	if old.fp == fp {
		s.mu.Unlock()
		return nil
	}
	s.retireLocked(old)
	s.addLocked(nc, fp)
	s.mu.Unlock()
	s.log.Info("cluster updated; restarting it", "cluster", nc.Name, "source", nc.Source.String())
	return s.waitStopped(old)
}

// Delete stops a member cluster and forgets it. It needs only the name and
// returns once the member's Manager has stopped (at most
// Options.StopTimeout). An unknown name is ErrClusterNotFound.
func (s *Server) Delete(name string) error {
	s.mu.Lock()
	m, ok := s.members[name]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("cluster %q: %w", name, ErrClusterNotFound)
	}
	delete(s.members, name)
	s.routes.Remove(name)
	s.retireLocked(m)
	s.mu.Unlock()
	forgetMetrics(name)
	s.log.Info("cluster deleted", "cluster", name)
	return s.waitStopped(m)
}

func validate(nc *config.NamedConfig) error {
	switch {
	case nc == nil:
		return fmt.Errorf("%w: nil", ErrInvalidConfig)
	case nc.Name == "":
		return fmt.Errorf("%w: empty name (%s)", ErrInvalidConfig, nc.Source.String())
	case nc.Config == nil:
		return fmt.Errorf("%w: cluster %q has no rest.Config", ErrInvalidConfig, nc.Name)
	}
	return nil
}

func (s *Server) addLocked(nc *config.NamedConfig, fp string) {
	m := newMember(s, nc, fp, s.prev[nc.Name])
	delete(s.prev, nc.Name)
	s.members[nc.Name] = m
	s.routes.Set(nc.Name, nil, false)
	if s.runCtx != nil && s.runCtx.Err() == nil {
		m.start(s.runCtx)
	}
}

func (s *Server) retireLocked(m *member) {
	m.stop()
	s.prev[m.name] = m.done
}

func (s *Server) waitStopped(m *member) error {
	t := time.NewTimer(s.opts.StopTimeout)
	defer t.Stop()
	select {
	case <-m.done:
		return nil
	case <-t.C:
		return fmt.Errorf("cluster %q: %w after %s", m.name, ErrStopTimeout, s.opts.StopTimeout)
	}
}

// setRoute points the fan-out client at c for m's cluster (ready: for
// fleet-wide Lists too), as long as m is still the member of that name.
func (s *Server) setRoute(m *member, c crclient.Client, ready bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.members[m.name] == m {
		s.routes.Set(m.name, c, ready)
	}
}

// setUnreachable marks (err != nil) or clears m's cluster as unreachable for
// fleet-wide Lists, as long as m is still the member of that name.
func (s *Server) setUnreachable(m *member, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.members[m.name] == m {
		s.routes.SetUnreachable(m.name, err)
	}
}

// AddReconcilerSetup registers a function, typically a reconciler's
// SetupWithManager, that runs against every member's Manager: the members
// already added, those added later, and each new Manager a member gets after
// an Update or a retry. A setup that fails fails that member (it is
// retried), not the Server.
func (s *Server) AddReconcilerSetup(setup func(ctrl.Manager) error) {
	s.mu.Lock()
	s.setups = append(s.setups, setup)
	members := make([]*member, 0, len(s.members))
	for _, m := range s.members {
		members = append(members, m)
	}
	s.mu.Unlock()
	for _, m := range members {
		m.applyNewSetups()
	}
}

// setup returns the i-th registered setup.
func (s *Server) setup(i int) (func(ctrl.Manager) error, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= len(s.setups) {
		return nil, false
	}
	return s.setups[i], true
}

// Start runs the host Manager and, while it leads, every member. It blocks
// until ctx ends and returns after every member has stopped. A member's
// failure never makes Start return; the host Manager's errors do.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return ErrAlreadyStarted
	}
	s.started = true
	s.mu.Unlock()
	err := s.host.Start(ctx)
	s.stopWatchers()
	s.wg.Wait()
	s.memberWG.Wait()
	s.releaseHost()
	return err
}

// fleetRunnable runs the members inside the host Manager, only while it
// leads.
type fleetRunnable struct{ s *Server }

func (fleetRunnable) NeedLeaderElection() bool { return true }

func (r fleetRunnable) Start(ctx context.Context) error {
	s := r.s
	s.wg.Add(1)
	defer s.wg.Done()
	s.mu.Lock()
	s.runCtx = ctx
	for _, m := range s.members {
		if !m.started {
			m.start(ctx)
		}
	}
	s.mu.Unlock()
	s.log.Info("starting members")
	<-ctx.Done()
	s.mu.Lock()
	s.runCtx = nil
	s.mu.Unlock()
	s.log.Info("stopping members")
	// Return (and so let the host Manager release its lease) only once every
	// member has stopped, so that a new leader never runs a member while this
	// one still does.
	s.memberWG.Wait()
	return nil
}

// GetClient returns the fan-out client: each call goes to the cluster named
// in its ctx; a List with no cluster in ctx spans the fleet.
func (s *Server) GetClient() *mcclient.Client { return s.client }

// GetScheme returns the scheme from the Options given to NewServer (or
// client-go's default scheme), shared by the host and every member.
func (s *Server) GetScheme() *runtime.Scheme { return s.host.GetScheme() }

// GetLogger returns the Server's logger.
func (s *Server) GetLogger() logr.Logger { return s.log }

// GetHostManager returns the host Manager: register host-cluster
// reconcilers, runnables, webhooks and health checks on it.
func (s *Server) GetHostManager() manager.Manager { return s.host }

// GetHostClient returns the host cluster's client, for member reconcilers
// that record their work on the host (the "manage client").
func (s *Server) GetHostClient() crclient.Client { return s.host.GetClient() }

// GetManager returns the running Manager of a Ready member, or an error
// wrapping ErrClusterNotFound or ErrClusterNotReady.
func (s *Server) GetManager(name string) (manager.Manager, error) {
	s.mu.Lock()
	m, ok := s.members[name]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("cluster %q: %w", name, ErrClusterNotFound)
	}
	if mgr := m.manager(); mgr != nil {
		return mgr, nil
	}
	return nil, fmt.Errorf("cluster %q: %w", name, ErrClusterNotReady)
}

// WithClient calls fn with the client of a Ready member. No lock of the
// Server is held while fn runs.
func (s *Server) WithClient(name string, fn func(crclient.Client) error) error {
	c, err := s.routes.Cluster(name)
	if err != nil {
		return err
	}
	return fn(c)
}

// ClusterNames returns the names of every member, Ready or not, sorted.
func (s *Server) ClusterNames() []string { return s.routes.Names() }

// Status returns one member's status, or ErrClusterNotFound.
func (s *Server) Status(name string) (ClusterStatus, error) {
	s.mu.Lock()
	m, ok := s.members[name]
	s.mu.Unlock()
	if !ok {
		return ClusterStatus{}, fmt.Errorf("cluster %q: %w", name, ErrClusterNotFound)
	}
	return m.snapshot(), nil
}

// Statuses returns every member's status, sorted by name.
func (s *Server) Statuses() []ClusterStatus {
	s.mu.Lock()
	members := make([]*member, 0, len(s.members))
	for _, m := range s.members {
		members = append(members, m)
	}
	s.mu.Unlock()
	out := make([]ClusterStatus, 0, len(members))
	for _, m := range members {
		out = append(out, m.snapshot())
	}
	slices.SortFunc(out, func(a, b ClusterStatus) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}
