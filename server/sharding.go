package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/mccr-dev/mccr/internal/shard"
)

// ErrNoShardGroup is returned by NewServer for a sharded Server whose
// replicas' Group is not set: neither ShardingOptions.Group nor the
// LeaderElectionID of the ctrl.Options names it.
var ErrNoShardGroup = errors.New("sharding: no Group: set ShardingOptions.Group (or ctrl.Options.LeaderElectionID) to a name of this program")

// ErrNoShardNamespace is returned by NewServer for a sharded Server that
// has no namespace for its Leases: neither ShardingOptions.Namespace nor
// the LeaderElectionNamespace of the ctrl.Options names one, and it does
// not run in a Pod, whose namespace it would default to.
var ErrNoShardNamespace = errors.New("sharding: no namespace for the Leases: set ShardingOptions.Namespace (or ctrl.Options.LeaderElectionNamespace); not running in a Pod, there is no namespace of its own to default to")

// inClusterNamespaceFile holds the namespace of the Pod a program runs in,
// as controller-runtime's leader election reads it.
var inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// ShardingOptions splits the fleet among the replicas of one program (see
// WithSharding). Every field but Group has a default.
type ShardingOptions struct {
	// Identity names this replica; unique among the replicas and new for
	// each process. Defaults to the host name and a random suffix. Two
	// processes that share one (a copied Deployment, a host name shared on
	// hostNetwork) are detected: each logs an error, records a Warning
	// event on its Lease, sets mccr_shard_duplicate_identity, fails
	// ShardingReadyCheck and runs no cluster until it is alone again.
	Identity string

	// Namespace holds the Leases on the host cluster. Defaults, as
	// controller-runtime's leader election does, to the
	// LeaderElectionNamespace of the ctrl.Options given to NewServer, else
	// the namespace of the Pod the program runs in; out of a cluster,
	// NewServer refuses a sharded Server without either
	// (ErrNoShardNamespace). Installs of one program in two namespaces
	// thus never share a fleet's Leases.
	Namespace string

	// Group names the replicas that share one fleet: only replicas of the
	// same Group count for each other, and any two different Groups —
	// whatever their length, case or punctuation — never share a Lease.
	// Defaults to the LeaderElectionID of the ctrl.Options; NewServer
	// refuses a sharded Server without either (ErrNoShardGroup), since two
	// programs sharded in one namespace under one default would split one
	// fleet between them.
	Group string

	// LeaseDuration is how long a replica that stopped renewing its Lease
	// still counts as live: its clusters move elsewhere that long after it
	// was last heard from. Each replica writes it into its Leases, and the
	// others judge it by what it wrote, not by their own setting, so
	// replicas with different timings (during a rolling update that
	// changes them) never run a cluster at once. RenewDeadline is how long
	// a replica keeps its clusters while it cannot renew; it must stop
	// them before LeaseDuration passes, so keep the members' graceful
	// shutdown well under LeaseDuration − RenewDeadline (NewServer refuses
	// otherwise). RetryPeriod is how often a replica renews, and retries
	// while it cannot. Defaults: RenewDeadline 10s, RetryPeriod 2s,
	// LeaseDuration 15s or RenewDeadline + the members' graceful shutdown
	// timeout + 2s, whichever is longer.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration

	// LoadFactor bounds each replica's load to ceil(LoadFactor × clusters
	// ÷ replicas). Default 1.25. Each replica writes it into its Lease:
	// while the live replicas differ on it (a rolling update that changes
	// it), every one bounds loads by the default, so that they still agree
	// on where each cluster runs.
	LoadFactor float64

	// Pins runs a cluster (key) on a replica (value, an Identity) whenever
	// that replica is live.
	Pins map[string]string
}

// WithSharding runs the Server as one of several replicas that split the
// fleet between them, coordinated through Leases on the host cluster
// (coordination.k8s.io; the host identity needs get, list, watch, create,
// update and delete on leases in ShardingOptions.Namespace, and create on
// events.k8s.io events to report a duplicate identity).
//
// Every replica runs the same program with the same cluster sources. Each
// renews a Lease of its own; the live replicas are those whose Lease
// changed, as each replica sees it, within the lease duration the Lease
// declares. Each cluster is assigned to one live replica by consistent
// hashing with bounded loads, and runs there only while that replica holds
// the cluster's own Lease: a replica takes a cluster's Lease only when its
// previous holder released it (after its Manager stopped) or the holder's
// claim expired by the duration it declared, so no cluster ever runs on
// two replicas at once. A replica that stops gracefully hands its clusters
// over before it exits; one that dies loses them LeaseDuration after it
// was last heard from. After the host cluster's API server was down (an
// upgrade of the control plane), every replica runs its clusters again
// within a renewal of it answering — but with LeaderElection on, an outage
// longer than the election's RenewDeadline ends the Start of the replica
// that leads (controller-runtime's "leader election lost"), and its
// clusters run again a lease duration later.
//
// On each replica, Status and the fan-out client cover every cluster:
// those another replica runs are in PhaseElsewhere with their Owner, and a
// call aimed at one of them — a read as much as a write — fails at once
// with a *client.ElsewhereError (errors.Is(err, client.ErrClusterElsewhere)
// holds; errors.As gives the cluster and the owner), and Status(name).Owner
// gives the owner too. A replica
// answers only for the clusters it runs, from the caches it keeps for them
// alone; a caller that needs another replica's cluster asks that replica.
// Fleet-wide Lists cover this replica's clusters only. Members no longer
// wait for the host Manager's leader election; host controllers that must
// run once still do. ShardingReadyCheck gives a readiness check that fails
// while another process uses this replica's identity.
func WithSharding(o ShardingOptions) Option {
	return func(opts *Options) { opts.Sharding = &o }
}

func (o *ShardingOptions) defaults(leaderElectionNamespace, leaderElectionID string, memberShutdown time.Duration) {
	if o.Identity == "" {
		host, _ := os.Hostname()
		suffix := make([]byte, 4)
		_, _ = rand.Read(suffix) // crypto/rand never fails
		o.Identity = host + "_" + hex.EncodeToString(suffix)
	}
	if o.Namespace == "" {
		o.Namespace = leaderElectionNamespace
	}
	if o.Namespace == "" {
		if raw, err := os.ReadFile(inClusterNamespaceFile); err == nil {
			o.Namespace = strings.TrimSpace(string(raw))
		}
	}
	if o.Group == "" {
		o.Group = leaderElectionID
	}
	if o.RenewDeadline <= 0 {
		o.RenewDeadline = 10 * time.Second
	}
	if o.LeaseDuration <= 0 {
		// Long enough for a replica that cannot renew to stop its members
		// (their graceful shutdown) before others may take them.
		o.LeaseDuration = max(15*time.Second, o.RenewDeadline+memberShutdown+2*time.Second)
	}
	if o.RetryPeriod <= 0 {
		o.RetryPeriod = 2 * time.Second
	}
}

func (o *ShardingOptions) validate(memberShutdown time.Duration, forever bool) error {
	switch {
	case o.Group == "":
		return ErrNoShardGroup
	case o.Namespace == "":
		return ErrNoShardNamespace
	case forever:
		return errors.New("sharding: members need a finite GracefulShutdownTimeout: a replica that cannot renew its Lease must have stopped its clusters before others take them")
	case memberShutdown >= o.LeaseDuration-o.RenewDeadline:
		return fmt.Errorf("sharding: members' GracefulShutdownTimeout (%s) must be shorter than LeaseDuration − RenewDeadline (%s): a replica that cannot renew its Lease must have stopped its clusters before others take them", memberShutdown, o.LeaseDuration-o.RenewDeadline)
	case o.LeaseDuration > shard.MaxLeaseDuration:
		return fmt.Errorf("sharding: LeaseDuration (%s) over %s", o.LeaseDuration, shard.MaxLeaseDuration)
	case o.LeaseDuration%time.Second != 0:
		return fmt.Errorf("sharding: LeaseDuration (%s) is not a whole number of seconds, as a Lease declares it", o.LeaseDuration)
	case o.RenewDeadline >= o.LeaseDuration:
		return fmt.Errorf("sharding: RenewDeadline (%s) must be shorter than LeaseDuration (%s)", o.RenewDeadline, o.LeaseDuration)
	case o.RetryPeriod >= o.RenewDeadline:
		return fmt.Errorf("sharding: RetryPeriod (%s) must be shorter than RenewDeadline (%s)", o.RetryPeriod, o.RenewDeadline)
	}
	return nil
}

// ShardingReadyCheck returns a health check, for the host Manager's
// AddReadyzCheck, that fails while another process renews this replica's
// Lease (two replicas share one Identity); such a replica runs no cluster
// until it is alone again. It always passes on a Server without sharding.
// The Server adds no such check by itself.
func (s *Server) ShardingReadyCheck() healthz.Checker {
	return func(req *http.Request) error {
		if s.shard == nil {
			return nil
		}
		return s.shard.Check(req)
	}
}
