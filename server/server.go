package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/mccr-dev/mccr/internal/member"
	"github.com/mccr-dev/mccr/internal/router"
	"github.com/mccr-dev/mccr/internal/syncinformer"
	"github.com/mccr-dev/mccr/known"
)

var (
	// ErrClusterNotFound is returned for a cluster name the fleet does not
	// have. The same error value as the fan-out client's, so errors.Is
	// works across both.
	ErrClusterNotFound = mcclient.ErrClusterNotFound
	// ErrClusterNotReady is returned for a cluster that exists but is not
	// Ready.
	ErrClusterNotReady = mcclient.ErrClusterNotReady
	// ErrOutcomeUnknown is returned by a write through the fan-out client
	// that was sent, but whose answer did not come within the write grace
	// once its cluster left or restarted, or that got no answer saying
	// whether it was applied (a broken connection, a server error): it may
	// have been applied. Read before retrying (see the client package).
	// The same value as the client package's.
	ErrOutcomeUnknown = mcclient.ErrOutcomeUnknown
	// ErrClusterExists is returned by Add of a known name with a different
	// config. Use Update to change a cluster's config.
	ErrClusterExists = errors.New("cluster already exists with a different config (use Update)")
	// ErrInvalidConfig is returned for a NamedConfig without a rest.Config
	// or whose name config.ValidateName refuses (the error wraps
	// config.ErrInvalidName then).
	ErrInvalidConfig = errors.New("invalid cluster config")
	// ErrStopTimeout is returned when a member's Manager did not stop
	// within Options.StopTimeout. It goes on stopping in the background,
	// and no new Manager of that name starts before it has stopped.
	ErrStopTimeout = errors.New("cluster did not stop in time")
	// ErrAlreadyStarted is returned by a second Start.
	ErrAlreadyStarted = errors.New("server already started")
	// ErrServerStopped is returned by Add once Start has returned: a
	// Server does not run again, so the cluster would never start.
	ErrServerStopped = errors.New("server stopped")
)

// Server is a controller-runtime Manager for a fleet: a host Manager that
// owns leader election, metrics, health probes and webhooks, plus one
// Manager per member cluster, each running every registered reconciler
// setup. See the package documentation.
type Server struct {
	// hostForbidden are the kinds the host's identity may not list or
	// watch, for the host kinds of member controllers (HostKind,
	// HostObject).
	hostForbidden *syncinformer.Kinds
	// hostMisses is the host's REST mapper as member controllers waiting
	// for a host kind the host does not serve ask it.
	hostMisses *hostMisses

	host        manager.Manager
	releaseHost func()
	env         env
	log         logr.Logger
	client      *mcclient.Client
	// conns shares connections among members (and the host) that reach the
	// same API server, and closes them when the last one stops.
	conns  conntrack.Pool
	routes router.Table
	// feed tells the fleet sources (FleetKind, ClusterEvents) of members'
	// phases.
	feed     fleetFeed
	setups   setupList
	clusters registry
	shard    *coordinator // with sharding
	// claims decides which watcher feeds each name; its lock comes before
	// any cluster's (see cluster.go).
	claims nameClaims

	mu       sync.Mutex // a leaf: see the locking notes in cluster.go
	run      *run       // set while the host Manager leads
	started  bool
	stopped  bool
	watchers []configwatcher.ConfigWatcher
	watchSeq int // numbers the watchers, for claims
	werrs    watchErrors
	watchWG  sync.WaitGroup
	runs     sync.WaitGroup // the fleet runnable
	// handover is a sharded Server's coordinator, which hands this
	// replica's clusters over as it stops.
	handover sync.WaitGroup

	// testChecked, when set, is called by add once it found the Server
	// runnable, before it adds the cluster.
	testChecked func()
}

// NewServer creates a Server whose host Manager runs against cfg with the
// given options, exactly as ctrl.NewManager(cfg, opts) would. The same
// options (minus metrics, probes, webhooks, pprof and leader election)
// shape every member's Manager: scheme, cache, client, controller defaults,
// logger, graceful shutdown timeout.
func NewServer(cfg *rest.Config, opts ctrl.Options, options ...Option) (*Server, error) {
	if cfg == nil {
		return nil, errors.New("server: host config is nil")
	}
	opts = hostOptions(opts)
	s := &Server{hostForbidden: syncinformer.NewKinds()}
	lease, err := s.conns.Acquire(cfg)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	host, err := ctrl.NewManager(lease.Config, recordHostForbidden(opts, s.hostForbidden))
	if err != nil {
		lease.Release()
		return nil, fmt.Errorf("server: creating host manager: %w", err)
	}
	s.hostMisses = &hostMisses{RESTMapper: host.GetRESTMapper()}
	var o Options
	for _, f := range options {
		f(&o)
	}
	o.defaults(opts.GracefulShutdownTimeout)
	if err := o.validate(); err != nil {
		lease.Release()
		return nil, fmt.Errorf("server: %w", err)
	}
	if o.Sharding != nil {
		sh := *o.Sharding
		shutdown, forever := member.ShutdownTimeout(opts.GracefulShutdownTimeout)
		sh.defaults(opts.LeaderElectionNamespace, opts.LeaderElectionID, shutdown)
		if err := sh.validate(shutdown, forever); err != nil {
			lease.Release()
			return nil, fmt.Errorf("server: %w", err)
		}
		o.Sharding = &sh
	}
	registerMetrics()
	s.host, s.releaseHost = host, lease.Release
	s.log = opts.Logger.WithName("mccr")
	s.env = env{conns: &s.conns, routes: &s.routes, feed: &s.feed, setups: &s.setups, memberOpts: memberOptions(opts), opts: o, log: s.log, sharded: o.Sharding != nil}
	if o.FleetPage {
		if err := s.mountFleetPage(); err != nil {
			lease.Release()
			return nil, fmt.Errorf("server: fleet page: %w", err)
		}
	}
	s.client = mcclient.New(&s.routes, mcclient.Options{Scheme: host.GetScheme(), RESTMapper: host.GetRESTMapper()})
	if o.Sharding != nil {
		co, err := newCoordinator(host, *o.Sharding, &s.clusters, s.log)
		if err == nil {
			s.shard = co
			err = host.Add(coordinatorRunnable{s: s, co: co})
		}
		if err != nil {
			lease.Release()
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	if err := host.Add(fleetRunnable{s}); err != nil {
		lease.Release()
		return nil, fmt.Errorf("server: %w", err)
	}
	if o.HostMember != "" {
		if err := s.addHostMember(o.HostMember, cfg); err != nil {
			lease.Release()
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	return s, nil
}

// Add adds a member cluster. It never touches the network: the cluster is
// started in the background (at once if the Server runs, else when it
// does; with Options.ColdStandby, once it leads) and its progress shows in
// Status. Adding the same name with
// the same config again is a no-op; with a different config it is
// ErrClusterExists. A name deleted while its Manager still stops may be
// added again at once: the new Manager starts after the old one stopped.
//
// A name added here is the program's own: a watcher given to Watch that
// sends it is refused with ErrClusterNameTaken (its config waits, and takes
// over only after Delete), and Add, Update or Delete of a name a watcher
// feeds is refused the same way, naming the watcher's source. Once Start
// has returned, Add is ErrServerStopped.
func (s *Server) Add(nc *config.NamedConfig) error {
	if err := validate(nc); err != nil {
		return err
	}
	return s.claims.add(s, nc)
}

// add adds a cluster whatever its claims; see Add. A watcher's events
// come here too: none adds a cluster once Start has returned.
func (s *Server) add(nc *config.NamedConfig) error {
	if err := s.checkRunnable(nc.Name); err != nil {
		return err
	}
	if s.testChecked != nil {
		s.testChecked()
	}
	fp := fingerprintsOf(nc)
	for {
		c := s.clusters.getOrCreate(nc.Name, func() *cluster { return newCluster(nc.Name, &s.env, &s.clusters) })
		err := c.add(nc, fp)
		if errors.Is(err, errDead) {
			continue
		}
		if err != nil {
			return err
		}
		if s.hasStopped() {
			// Start returned meanwhile, and may have forgotten its members'
			// series before this one had any: the cluster is recorded, as
			// by an Update once Start has returned, and has no series.
			c.forgetSeries()
			return nil
		}
		if r := s.currentRun(); r != nil {
			c.start(r)
		}
		s.log.Info("cluster added", "cluster", nc.Name, "source", nc.Source.String())
		return nil
	}
}

// Update replaces a member's config. The same config again is a no-op; a
// changed one stops that member's Manager and starts a new one with the new
// config, leaving every other member alone. A config that differs only in
// its Properties or Source (config.NamedConfig.ReachFingerprint unchanged)
// keeps the running Manager and takes the new ones at once; one that differs
// only in its bearer token, token file or username and password
// (config.NamedConfig.ConnectionFingerprint unchanged, no exec plugin)
// keeps it too, and its requests carry the new credentials from then on
// (a member that failed and waits to retry restarts on them at once).
// Update returns once the old Manager has stopped (or with ErrStopTimeout
// after Options.StopTimeout; the new Manager starts only once the old one
// has stopped, whenever that is). Once Start has returned, Update only
// records the config: nothing runs again.
func (s *Server) Update(nc *config.NamedConfig) error {
	if err := validate(nc); err != nil {
		return err
	}
	stopped, err := s.claims.update(s, nc)
	if err != nil {
		return err
	}
	return s.waitStopped(nc.Name, stopped)
}

func (s *Server) update(nc *config.NamedConfig) (<-chan struct{}, error) {
	fp := fingerprintsOf(nc)
	for {
		c := s.clusters.get(nc.Name)
		if c == nil {
			return nil, fmt.Errorf("cluster %q: %w", nc.Name, ErrClusterNotFound)
		}
		stopped, how, err := c.update(nc, fp)
		if errors.Is(err, errDead) {
			continue
		}
		switch {
		case err != nil:
		case how == updatedRestart:
			s.log.Info("cluster updated; restarting it", "cluster", nc.Name, "source", nc.Source.String())
		case how == updatedCredentials:
			s.log.Info("cluster credentials updated; member keeps running on the new ones", "cluster", nc.Name, "source", nc.Source.String())
		case how == updatedProperties:
			s.log.Info("cluster properties or source updated; member keeps running", "cluster", nc.Name, "source", nc.Source.String())
		}
		return stopped, err
	}
}

// Delete stops a member cluster and forgets it. It needs only the name and
// returns once the member's Manager has stopped (or with ErrStopTimeout
// after Options.StopTimeout; the cluster is gone from the fleet either
// way). An unknown name is ErrClusterNotFound. A name that a watcher given
// to Watch feeds is ErrClusterNameTaken: that watcher decides.
func (s *Server) Delete(name string) error {
	stopped, err := s.claims.remove(s, name)
	if err != nil {
		return err
	}
	return s.waitStopped(name, stopped)
}

func (s *Server) remove(name string) (<-chan struct{}, error) {
	for {
		c := s.clusters.get(name)
		if c == nil {
			return nil, fmt.Errorf("cluster %q: %w", name, ErrClusterNotFound)
		}
		stopped, err := c.remove()
		if errors.Is(err, errDead) {
			continue
		}
		if err == nil {
			s.log.Info("cluster deleted", "cluster", name)
		}
		return stopped, err
	}
}

func validate(nc *config.NamedConfig) error {
	if nc == nil {
		return fmt.Errorf("%w: nil", ErrInvalidConfig)
	}
	if err := config.ValidateName(nc.Name); err != nil {
		if src := nc.Source.String(); src != "" {
			return fmt.Errorf("%w from %s: %w", ErrInvalidConfig, src, err)
		}
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if nc.Config == nil {
		return fmt.Errorf("%w: cluster %q has no rest.Config", ErrInvalidConfig, nc.Name)
	}
	return nil
}

// checkRunnable refuses a cluster to a Server whose Start has returned.
func (s *Server) checkRunnable(name string) error {
	if s.hasStopped() {
		return fmt.Errorf("cluster %q: %w", name, ErrServerStopped)
	}
	return nil
}

// hasStopped reports whether Start has returned (or is returning).
func (s *Server) hasStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

func (s *Server) waitStopped(name string, stopped <-chan struct{}) error {
	if stopped == nil {
		return nil
	}
	if s.env.opts.StopTimeout < 0 {
		<-stopped
		return nil
	}
	t := time.NewTimer(s.env.opts.StopTimeout)
	defer t.Stop()
	select {
	case <-stopped:
		return nil
	case <-t.C:
		return fmt.Errorf("cluster %q: %w after %s", name, ErrStopTimeout, s.env.opts.StopTimeout)
	}
}

func (s *Server) currentRun() *run {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.run
}

// AddReconcilerSetup registers a function, typically a reconciler's
// SetupWithManager, that runs against every member's Manager: the members
// already added, those added later, and each new Manager a member gets after
// an Update or a retry. A setup that fails fails that member (it is
// retried), not the Server. Setups run in the member's own goroutine, never
// under a lock of the Server.
func (s *Server) AddReconcilerSetup(setup func(ctrl.Manager) error) {
	s.setups.add(setup)
	for _, c := range s.clusters.all() {
		c.kick()
	}
}

// Start runs the host Manager and every member: with leader election, a
// standby runs the members' caches (the fan-out client reads them) and
// their controllers start once it leads, unless Options.ColdStandby keeps
// members to the leader. It blocks until ctx ends (or leadership is lost)
// and returns after every member has stopped, or, as a controller-runtime
// Manager gives up on its runnables after its graceful shutdown timeout,
// Options.StopTimeout after ctx ended with an error wrapping
// ErrStopTimeout that names the members still stopping (a reconciler that
// ignores its ctx, say). A sharded Server returns only once it has handed
// its clusters over (their Leases released after their Managers stopped),
// however long that takes past StopTimeout on a slow host: at most its
// LeaseDuration and the calls under way then. A member's failure never
// makes Start return; the host Manager's errors do.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return ErrAlreadyStarted
	}
	s.started = true
	s.mu.Unlock()
	var ended atomic.Pointer[time.Time]
	defer context.AfterFunc(ctx, func() { now := time.Now(); ended.Store(&now) })()
	err := s.host.Start(ctx)
	s.stopWatchers()
	if werr := s.awaitRuns(ended.Load()); werr != nil {
		err = errors.Join(err, werr)
	}
	// Bounded by the coordinator itself. Returning before it has released
	// the Leases of clusters that stopped here would leave them to run
	// nowhere, once the process exits, until those Leases expire.
	s.handover.Wait()
	s.clusters.forgetSeries()
	s.releaseHost()
	return err
}

// awaitRuns waits for the members to stop, up to Options.StopTimeout after
// ended (when ctx ended; now if it did not).
func (s *Server) awaitRuns(ended *time.Time) error {
	done := make(chan struct{})
	go func() {
		s.runs.Wait()
		close(done)
	}()
	timeout := s.env.opts.StopTimeout
	if timeout < 0 {
		<-done
		return nil
	}
	if ended != nil {
		timeout -= time.Since(*ended)
	}
	t := time.NewTimer(max(timeout, 0))
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
	}
	var stopping []string
	for _, c := range s.clusters.all() {
		if c.running() {
			stopping = append(stopping, strconv.Quote(c.name))
		}
	}
	slices.Sort(stopping)
	return fmt.Errorf("members %s: %w after %s", strings.Join(stopping, ", "), ErrStopTimeout, s.env.opts.StopTimeout)
}

// coordinatorRunnable runs a sharded Server's coordinator in the host
// Manager; Server.Start waits for it (it hands the clusters over on the way
// out).
type coordinatorRunnable struct {
	s  *Server
	co *coordinator
}

func (coordinatorRunnable) NeedLeaderElection() bool { return false }

// Start returns once ctx ends: the handover that follows (members
// stopping, then their Leases released) may outlast the host Manager's
// graceful shutdown timeout, and Server.Start waits for it through
// handover.
func (r coordinatorRunnable) Start(ctx context.Context) error {
	r.s.handover.Go(func() { _ = r.co.Start(ctx) }) // never fails
	<-ctx.Done()
	return nil
}

// fleetRunnable runs the members inside the host Manager.
type fleetRunnable struct{ s *Server }

// NeedLeaderElection: members run on every replica, as controller-runtime
// runs its caches on standbys, and their controllers wait for the host's
// election (see Start). With Options.ColdStandby members run only while
// the host leads. A sharded fleet runs each replica's share on it.
func (f fleetRunnable) NeedLeaderElection() bool {
	return !f.s.env.sharded && f.s.env.opts.ColdStandby
}

func (f fleetRunnable) Start(ctx context.Context) error {
	s := f.s
	s.runs.Add(1)
	defer s.runs.Done()
	r := &run{ctx: ctx}
	if !f.NeedLeaderElection() && !s.env.sharded {
		// A standby's members serve reads (and start warm once it leads);
		// their controllers and other leader-election runnables wait.
		r.elected = s.host.Elected()
	}
	s.mu.Lock()
	s.run = r
	s.mu.Unlock()
	s.log.Info("starting members")
	for _, c := range s.clusters.all() {
		c.start(r)
	}
	<-ctx.Done()
	s.log.Info("stopping members")
	for _, c := range s.clusters.all() {
		c.runEnded()
	}
	// Return (and so let the host Manager release its lease) only once every
	// member has stopped, so that a new leader never runs a member while this
	// one still does; or once Options.StopTimeout has passed, as a
	// controller-runtime Manager gives up on its runnables after its
	// graceful shutdown timeout: Start waits no longer than StopTimeout,
	// however long the host Manager's timeout (it reports the members still
	// stopping, which runs tracks).
	closed := make(chan struct{})
	s.runs.Go(func() {
		defer close(closed)
		r.close()
		s.mu.Lock()
		if s.run == r {
			s.run = nil
		}
		s.mu.Unlock()
	})
	if timeout := s.env.opts.StopTimeout; timeout >= 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-closed:
		case <-t.C:
		}
		return nil
	}
	<-closed
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
	c := s.clusters.get(name)
	if c == nil || !c.known() {
		return nil, fmt.Errorf("cluster %q: %w", name, ErrClusterNotFound)
	}
	if mgr := c.manager(); mgr != nil {
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

// Status returns one member's status, or ErrClusterNotFound. Its map and
// slices are the caller's own.
func (s *Server) Status(name string) (ClusterStatus, error) {
	if c := s.clusters.get(name); c != nil {
		if p := c.published(); p != nil {
			return p.copied(), nil
		}
	}
	return ClusterStatus{}, fmt.Errorf("cluster %q: %w", name, ErrClusterNotFound)
}

// ClusterProperties returns the Properties of the member named in ctx (a
// member reconciler's ctx, or one made with known.WithCluster), as its
// source last gave them: nil when it gave none. An unknown member, or a ctx
// naming none, is ErrClusterNotFound.
func (s *Server) ClusterProperties(ctx context.Context) (map[string]string, error) {
	name, ok := known.ClusterFrom(ctx)
	if !ok {
		return nil, fmt.Errorf("no cluster in context: %w", ErrClusterNotFound)
	}
	st, err := s.Status(name)
	if err != nil {
		return nil, err
	}
	return st.Properties, nil
}

// Statuses returns every member's status, sorted by name. Their maps and
// slices (Properties, WaitingFor, Unserved) are shared with every other
// caller of Statuses: read them, and copy them before changing them (see
// ClusterStatus). Status returns copies of its own.
func (s *Server) Statuses() []ClusterStatus {
	return s.AppendStatuses(nil)
}

// AppendStatuses appends every member's status, sorted by name, to dst
// and returns the extended slice, as Statuses returns them (their maps
// and slices are shared likewise). A caller that asks again and again (a
// page or an exporter polling a large fleet) can pass the slice of its
// last call, emptied (dst[:0]): once it holds the fleet, a call allocates
// nothing and writes over memory already in use, where Statuses' new
// slice of a fleet of thousands (some 280 bytes a member) is memory the
// process has to fetch from the system again and again.
func (s *Server) AppendStatuses(dst []ClusterStatus) []ClusterStatus {
	// In the order of the fan-out client's sorted names (see memberOrder):
	// sorting the statuses, or looking every name up, on each call would
	// cost it a sort, or a lookup, of the whole fleet. Each status is the
	// one its record published last, copied from the order's view: no
	// member's lock is taken.
	return s.clusters.order.statuses(dst, s.routes.SortedNames(), &s.clusters)
}
