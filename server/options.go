package server

import (
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
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
	// Duration, capped at Cap. Reset once the member was Ready. Default 1s
	// doubling to at most 1m, with 20% jitter.
	Backoff wait.Backoff

	// StopTimeout bounds how long Delete and Update wait for a member's
	// Manager to stop. Default: the Manager's GracefulShutdownTimeout plus
	// 5s.
	StopTimeout time.Duration
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
		o.Backoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.2, Cap: time.Minute}
	}
	if o.Backoff.Steps <= 0 {
		o.Backoff.Steps = math.MaxInt32
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 30*time.Second + 5*time.Second
		if gracefulShutdown != nil && *gracefulShutdown >= 0 {
			o.StopTimeout = *gracefulShutdown + 5*time.Second
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

// memberOptions derives a member Manager's options from the user's: the
// same scheme, cache and client settings, controller defaults and logger,
// but none of the host-only parts. Members serve no metrics, probes, pprof
// or webhooks and run no leader election of their own: they only run while
// the host Manager leads.
func memberOptions(o ctrl.Options) ctrl.Options {
	o.Metrics = metricsserver.Options{BindAddress: "0"}
	o.HealthProbeBindAddress = "0"
	o.PprofBindAddress = "0"
	o.LeaderElection = false
	o.LeaderElectionConfig = nil
	o.LeaderElectionResourceLockInterface = nil
	o.WebhookServer = noWebhooks{}
	o.BaseContext = nil
	// The same SetupWithManager runs once per member, so the same
	// controller name exists once per member in this process.
	o.Controller.SkipNameValidation = ptr.To(true)
	// Controllers start their sources in the warm-up phase, which lets the
	// member tell when every controller's caches are synced (see
	// syncTracker).
	o.Controller.EnableWarmup = ptr.To(true)
	return o
}
