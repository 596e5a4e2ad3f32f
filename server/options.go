package server

import (
	"fmt"
	"math"
	"runtime"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mccr-dev/mccr/internal/member"
	"github.com/mccr-dev/mccr/internal/reach"
)

// Options tunes how the Server runs its member clusters. Everything the host
// Manager does (leader election, metrics, probes, webhooks) is configured
// through the ctrl.Options given to NewServer, as for a single cluster.
type Options struct {
	// CacheSyncTimeout bounds how long a member may take from start to
	// synced caches before it counts as Failed and is retried. Default 2m.
	CacheSyncTimeout time.Duration

	// ProbeTimeout bounds the reachability and credentials check made
	// before each start of a member. Default 5s.
	ProbeTimeout time.Duration

	// Backoff spaces the retries of a Failed member: exponential from
	// Duration by Factor (0: constant; between 0 and 1 is refused), with
	// up to Jitter × the delay added, never over Cap (0: no cap). Reset
	// once the member was Ready, however the attempt that got there ended.
	// Default 1s doubling to at most 1m, with up to 20% jitter; a Backoff
	// with only some fields set keeps them and takes the defaults of the
	// others it leaves zero only when Duration is zero too.
	Backoff wait.Backoff

	// OutageProbeInterval is how often a member probes its API server once
	// one of its requests got no answer, and while it is Unreachable, to
	// restart the member as soon as it answers again; and how often it
	// probes while its credential is refused, to see the renewed one
	// accepted. Default 500ms.
	OutageProbeInterval time.Duration

	// StopTimeout bounds how long Delete and Update wait for a member's
	// Manager to stop, and how long Start waits for the members once its
	// ctx ended. Default: the members' graceful shutdown timeout
	// (ctrl.Options.GracefulShutdownTimeout, with controller-runtime's
	// meaning: nil is 30s, zero does not wait, negative waits as long as it
	// takes) plus 5s; when that is negative, Delete and Update wait as long
	// as the Manager takes. Start returns (and the host Manager releases its
	// leader lease) once StopTimeout has passed, whatever the host
	// Manager's own timeout: one shorter than the members' graceful
	// shutdown lets a new leader start members that still stop here. A
	// sharded Server's Start also waits for its handover, which ends
	// about its LeaseDuration after ctx ended at the latest (see
	// Server.Start).
	StopTimeout time.Duration

	// CompressWatches keeps gzip on members' watch streams. By default a
	// member asks for them uncompressed: a watch is a long-lived stream of
	// small events, and compressing it costs a 32 KiB window per stream on
	// both sides and CPU per event (some 44 KiB per idle member, and a
	// third of a fleet's start-up CPU measured on loopback). A watch also
	// carries the initial list (client-go's watch-list): set this when
	// members are reached over slow links and hold many objects. Other
	// requests keep Go's default (gzip asked for) either way.
	CompressWatches bool

	// ClientGoInformers gives members client-go's SharedIndexInformer.
	// By default a member's informers are internal/leaninformer's: each
	// handler is handed the events client-go's would hand it, in the same
	// order, from a queue of its own, so a handler that takes its time (a
	// slow map function of Watches or of FleetKind) holds up neither the
	// cache, the watch, nor the kind's other handlers. A queue has a
	// goroutine only while it holds events: an idle informer with one
	// handler costs five goroutines and a 16 KiB buffer fewer than
	// client-go's, and each further handler two goroutines and 16 KiB.
	// A cache.Options.NewInformer given in ctrl.Options is used either way.
	ClientGoInformers bool

	// Sharding, if set, splits the fleet among replicas; see WithSharding.
	Sharding *ShardingOptions

	// MemberQPS and MemberBurst set the client-side rate limit of every
	// member whose config sets none (a NamedConfig's QPS and Burst, when
	// set, win for that member; see config.SetsRateLimit). By default
	// members have no client-side limit, as controller-runtime's own
	// config: flow control is left to the API server (API Priority and
	// Fairness). A kubeconfig loaded with client-go would otherwise keep
	// its 5 QPS, burst 10. A MemberQPS of zero or less is no limit; a
	// MemberBurst of zero with a positive MemberQPS is client-go's burst
	// (10); a negative one is refused. A config that sets its Burst alone
	// keeps it.
	MemberQPS   float32
	MemberBurst int

	// ColdStandby keeps members stopped on a replica that does not lead:
	// no caches, no reads, less memory, and a new leader starts every
	// member from nothing. By default (as controller-runtime does for its
	// own caches) a standby runs every member's caches so that reads and
	// webhooks work on it and a new leader starts warm; only controllers
	// and other runnables that need leader election wait for leadership.
	// Not used when the fleet is sharded.
	ColdStandby bool

	// HostMember, if set, also runs the host cluster as a member of that
	// name, with the host's config: a migrated operator keeps reconciling
	// the cluster it runs in. The name follows the rules of any member
	// name and is then taken: Add, Update and Delete of it are refused.
	HostMember string

	// FleetPage serves the fleet page on the host Manager's metrics server:
	// /fleetz, an HTML table of the members (phase and since when, source,
	// reachability, last error, shard owner, reconciles per controller,
	// kinds waited for) that needs no JavaScript and reloads itself, and
	// /fleetz.json with the same data. ?phase=Failed filters, ?sort=phase
	// or ?sort=since orders. Off by default, as controller-runtime's pprof
	// is: the page names every member, its source and its errors (redacted
	// as in Status). Whoever can reach the metrics port can read it, through
	// the same metricsserver.Options.FilterProvider and SecureServing as
	// /metrics when those are set. With the metrics server off (BindAddress
	// "0") there is no page.
	FleetPage bool

	// ReachProbeInterval is how often each running (Ready or Unreachable)
	// member's API server is probed, through the member's own connections
	// (GET /version), whether or not any watch is open: a member that
	// watches nothing, or whose API server hangs without closing its
	// connections, is found Unreachable within ReachProbeInterval plus
	// ReachProbeTimeout, and Ready again once it answers. While members
	// wait to start (the MaxConcurrentStarts bound holds some back: a
	// fleet of thousands registered at once, or started again), a member
	// that answered its last probe, with no request or watch failed since,
	// is probed every fourth interval only, which leaves the cores to the
	// starts: Unreachable then within four intervals plus the timeout. A
	// failed request or watch brings its next probe forward as ever. A
	// negative interval turns the periodic probe off (outages are then seen only
	// through the member's own requests). It also bounds how long a running
	// member's credential may stay refused after a 401 (at least
	// OutageProbeInterval) before the member fails. Default 5s.
	ReachProbeInterval time.Duration
	// ReachProbeTimeout bounds one probe; a probe without an answer by
	// then makes the member Unreachable. If the next probe is answered and
	// no request or watch of the member failed meanwhile (one slow answer
	// of a busy API server), the member is Ready again as it runs; after a
	// longer outage, or one that broke its connections, it restarts to
	// resync. Default 5s.
	ReachProbeTimeout time.Duration
	// MaxConcurrentProbes bounds how many probes are in flight at once
	// across the fleet; the others wait their turn, so with many members
	// whose API servers hang (each holding a slot for ReachProbeTimeout)
	// the others' probes can come later than ReachProbeInterval. Default 32.
	MaxConcurrentProbes int

	// MaxConcurrentStarts bounds how many members may be in the CPU-heavy
	// part of a start at once: the reachability check (dial, TLS
	// handshake), the reconciler setups and the initial lists up to synced
	// caches, or the slot's one-second hold, whichever ends first (a start
	// still going after a second waits on its API server, not on this
	// process, and goes on without its slot). A start whose check has no
	// answer after 50 ms, while goroutines get a CPU at once, goes on
	// without its slot likewise: its API server is far away (or not
	// answering), and the rest of its start waits on the same round trips,
	// so that a fleet of far clusters starts as fast as an unbounded one
	// (500 clusters 50 ms away: 3.8-3.9 s, where slots held through every
	// round trip took 5.8-6.5 s). While goroutines wait for a CPU (this
	// process's or the machine's cores all busy), a slow check is slow for
	// want of one, and the start keeps its slot.
	//
	// A freed slot goes to the newest waiting start, and every fourth to
	// the oldest so that none starves. A member waiting for a slot is in
	// PhaseQueued, and leaves at once when deleted. Default: 8 per core
	// (GOMAXPROCS at NewServer); negative: no bound, every member starts
	// at once, as soon as it is added.
	//
	// Why a bound. Members started together leave the process holding
	// more memory at rest than members started a few at a time: the
	// goroutine stacks their initial lists grew are freed, but those of
	// the members' long-lived goroutines end up scattered over many stack
	// spans, which stay in use. With 100 clusters registered at once and
	// a controller on ten kinds, measured per idle cluster: 629-640 KiB
	// with 16 starts at once, 637-669 with 32, 687-724 with 64 and 733-812
	// without a bound. And during a mass registration (thousands of
	// clusters added together, or a restart of the fleet) a member added
	// meanwhile starts within about the time the bound's starts take,
	// instead of after the whole backlog (10,000 fake clusters: one more
	// cluster's Add to its first Reconcile took 93 ms at the median with
	// 16, 2-3 s without a bound). The cost: a registration of thousands at
	// once can take longer, by up to a fifth in those runs.
	MaxConcurrentStarts int

	// probes is the Limiter of MaxConcurrentProbes, made with the defaults
	// so that every copy of the Options shares it.
	probes *reach.Limiter
	// starts is the gate of MaxConcurrentStarts (nil: no bound), shared
	// by every copy of the Options likewise.
	starts *startGate
}

// validate refuses what defaults cannot mend.
func (o *Options) validate() error {
	if f := o.Backoff.Factor; f < 0 || f > 0 && f < 1 || math.IsNaN(f) {
		return fmt.Errorf("Options.Backoff.Factor %v: want 0 (a constant delay) or at least 1; below 1 the retries of a failed member would come ever faster", f)
	}
	if j := o.Backoff.Jitter; j < 0 || math.IsNaN(j) {
		return fmt.Errorf("Options.Backoff.Jitter %v: want 0 or more", j)
	}
	if b := o.MemberBurst; b < 0 {
		// client-go would build a token bucket that refuses every request.
		return fmt.Errorf("Options.MemberBurst %d: want 0 (client-go's burst) or more", b)
	}
	return nil
}

// Option changes Options.
type Option func(*Options)

func (o *Options) defaults(gracefulShutdown *time.Duration) {
	if o.CacheSyncTimeout <= 0 {
		o.CacheSyncTimeout = 2 * time.Minute
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = 5 * time.Second
	}
	if o.Backoff.Duration <= 0 {
		// Unset: the defaults, for what the caller left zero.
		def := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.2, Cap: time.Minute}
		o.Backoff.Duration = def.Duration
		if o.Backoff.Factor == 0 {
			o.Backoff.Factor = def.Factor
		}
		if o.Backoff.Jitter == 0 {
			o.Backoff.Jitter = def.Jitter
		}
		if o.Backoff.Cap == 0 {
			o.Backoff.Cap = def.Cap
		}
	}
	if o.Backoff.Steps <= 0 {
		o.Backoff.Steps = math.MaxInt32
	}
	if !(o.MemberQPS > 0) { // zero, negative or NaN
		o.MemberQPS = -1 // client-go: no rate limiter
	}
	if o.OutageProbeInterval <= 0 {
		o.OutageProbeInterval = 500 * time.Millisecond
	}
	if o.ReachProbeInterval == 0 {
		o.ReachProbeInterval = 5 * time.Second
	}
	if o.ReachProbeTimeout <= 0 {
		o.ReachProbeTimeout = 5 * time.Second
	}
	if o.MaxConcurrentProbes <= 0 {
		o.MaxConcurrentProbes = 32
	}
	o.probes = reach.NewLimiter(o.MaxConcurrentProbes)
	if o.MaxConcurrentStarts == 0 {
		o.MaxConcurrentStarts = 8 * runtime.GOMAXPROCS(0)
	}
	o.starts = newStartGate(o.MaxConcurrentStarts, startSlotHold, startCheckHold)
	if o.StopTimeout <= 0 {
		o.StopTimeout = -1 // wait as long as the Manager takes
		if d, forever := member.ShutdownTimeout(gracefulShutdown); !forever {
			o.StopTimeout = d + 5*time.Second
		}
	}
}

// hostOptions fills in what the host Manager and the members share.
func hostOptions(o ctrl.Options) ctrl.Options {
	if o.Scheme == nil {
		o.Scheme = scheme.Scheme
	}
	if o.Logger.GetSink() == nil {
		o.Logger = ctrl.Log
	}
	return o
}

// memberOptions derives what member Managers share from the user's
// options: scheme, cache and client settings, controller defaults. The
// host-only parts (metrics, probes, pprof, webhooks, leader election) have
// no counterpart in a member Manager at all.
func memberOptions(o ctrl.Options) ctrl.Options {
	// The same SetupWithManager runs once per member, so the same
	// controller name exists once per member in this process.
	o.Controller.SkipNameValidation = ptr.To(true)
	// controller-runtime's priority queue runs five goroutines per
	// controller; its ordering (fresh events before the initial list) pays
	// off for very large caches. In a member of a fleet the classic queue,
	// with two, is the default; set UsePriorityQueue to choose.
	if o.Controller.UsePriorityQueue == nil {
		o.Controller.UsePriorityQueue = ptr.To(false)
	}
	return o
}
