package shard

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
)

// MaxLeaseDuration bounds the lease durations a replica declares, and how
// long it honours the duration another Lease declares.
const MaxLeaseDuration = time.Hour

// Members is the fleet as the Server knows it. The Coordinator calls it;
// it never calls the Coordinator. Its methods are called from two
// goroutines (the loop and the watchdog) and must not block.
type Members interface {
	// Names returns the fleet's clusters.
	Names() []Member
	// Own lets this replica run the cluster: it holds the cluster's Lease.
	Own(name string)
	// Disown stops the cluster on this replica, if it runs here, and tells
	// that owner (another replica, or "" for none known) runs it. The
	// channel closes once no Manager of the cluster runs here any more.
	Disown(name, owner string) <-chan struct{}
	// StopAll stops every cluster that runs here, owner unknown: the
	// replica can no longer renew its Lease.
	StopAll()
}

// Member is one cluster of the fleet, as Members.Names gives it.
type Member struct {
	Name string
	// Record identifies the record the Members keep of the cluster (any
	// comparable value): when it changes (the cluster was deleted and
	// added again, and its new record knows nothing yet), the Coordinator
	// tells the new record afresh whether it runs here and who runs it.
	Record any
}

// Metrics receives what a replica's series show. Its methods are called
// from the loop's goroutine.
type Metrics interface {
	// Owned is how many clusters this replica runs.
	Owned(n int)
	// Handover counts a cluster taken over from another holder or from a
	// release, with how long nobody ran it as this replica saw it, by its
	// own clock: since it saw the release (or saw the Lease last held, for
	// one deleted or blanked), or since it last saw the holder renew its
	// replica Lease. Another replica's clock never enters it.
	Handover(unowned time.Duration)
	// DuplicateIdentity is whether another process renews this replica's
	// Lease.
	DuplicateIdentity(bool)
}

// Options configure a Coordinator. The Server fills the first group (see
// server.ShardingOptions, which documents them and defaults them); the rest
// default here.
type Options struct {
	Identity, Namespace, Group                string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	LoadFactor                                float64
	Pins                                      map[string]string

	// Logger defaults to a logger that discards.
	Logger logr.Logger
	// Metrics defaults to none.
	Metrics Metrics
	// Events, if set, records a Warning on this replica's Lease when
	// another process renews it.
	Events events.EventRecorder
	// Clock defaults to the real clock; tests step a fake one.
	Clock clock.WithTicker
	// Writer is this process's mark on the Leases it writes; defaults to a
	// random value. Two processes must never share one.
	Writer string

	// pins is PinsKey(Pins), set by defaults.
	pins string
	// loadFactor is LoadFactor as its Lease declares it, set by defaults.
	loadFactor string
}

func (o *Options) defaults() {
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
	if o.Metrics == nil {
		o.Metrics = noMetrics{}
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	o.pins = PinsKey(o.Pins)
	o.LoadFactor = validLoadFactor(o.LoadFactor)
	o.loadFactor = strconv.FormatFloat(o.LoadFactor, 'g', -1, 64)
	if o.Writer == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b) // crypto/rand never fails
		o.Writer = hex.EncodeToString(b)
	}
}

// requestTimeout bounds one call to the API server: long enough for a
// loaded server, short enough that a hung connection costs a renewal or
// two, not the renew deadline.
func (o *Options) requestTimeout() time.Duration {
	return max(o.RetryPeriod, o.RenewDeadline/3)
}

type noMetrics struct{}

func (noMetrics) Owned(int)              {}
func (noMetrics) Handover(time.Duration) {}
func (noMetrics) DuplicateIdentity(bool) {}
