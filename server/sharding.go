package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// ShardingOptions splits the fleet among the replicas of one program (see
// WithSharding). The zero value is usable: every field has a default.
type ShardingOptions struct {
	// Identity names this replica; unique among the replicas and new for
	// each process. Defaults to the host name and a random suffix.
	Identity string

	// Namespace holds the Leases on the host cluster. Defaults to the
	// LeaderElectionNamespace of the ctrl.Options given to NewServer, else
	// "default".
	Namespace string

	// Group names the replicas that share one fleet: their Leases carry it
	// as a label, and only they count for each other. Defaults to the
	// LeaderElectionID of the ctrl.Options, else "mccr".
	Group string

	// LeaseDuration is how long a replica that stopped renewing its Lease
	// still counts as live: its clusters move elsewhere that long after it
	// was last heard from. RenewDeadline is how long a replica keeps its
	// clusters while it cannot renew; it must stop them before
	// LeaseDuration passes, so keep the members' graceful shutdown well
	// under LeaseDuration − RenewDeadline (NewServer refuses otherwise).
	// RetryPeriod is how often a replica renews. Defaults: RenewDeadline
	// 10s, RetryPeriod 2s, LeaseDuration 15s or RenewDeadline + the
	// members' graceful shutdown timeout + 2s, whichever is longer.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration

	// LoadFactor bounds each replica's load to ceil(LoadFactor × clusters
	// ÷ replicas). Default 1.25.
	LoadFactor float64

	// Pins runs a cluster (key) on a replica (value, an Identity) whenever
	// that replica is live.
	Pins map[string]string
}

// WithSharding runs the Server as one of several replicas that split the
// fleet between them, coordinated through Leases on the host cluster
// (coordination.k8s.io; the host identity needs get, list, watch, create,
// update and delete on leases in ShardingOptions.Namespace).
//
// Every replica runs the same program with the same cluster sources. Each
// heartbeats a Lease of its own; the live replicas are those whose Lease
// was renewed within LeaseDuration. Each cluster is assigned to one live
// replica by consistent hashing with bounded loads, and runs there only
// once that replica holds the cluster's own Lease: a replica takes a
// cluster's Lease only when its previous holder released it (after its
// Manager stopped) or the holder's replica Lease expired, so no cluster
// ever runs on two replicas at once. A replica that stops gracefully hands
// its clusters over before it exits; one that dies loses them
// LeaseDuration after it was last heard from.
//
// On each replica, Status and the fan-out client cover every cluster:
// those another replica runs are in PhaseElsewhere with their Owner, calls
// aimed at them fail with ErrClusterElsewhere naming it, and fleet-wide
// Lists cover this replica's clusters only. Members no longer wait for the
// host Manager's leader election; host controllers that must run once
// still do.
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
		o.Namespace = "default"
	}
	if o.Group == "" {
		o.Group = leaderElectionID
	}
	if o.Group == "" {
		o.Group = "mccr"
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
	case forever:
		return errors.New("sharding: members need a finite GracefulShutdownTimeout: a replica that cannot renew its Lease must have stopped its clusters before others take them")
	case memberShutdown >= o.LeaseDuration-o.RenewDeadline:
		return fmt.Errorf("sharding: members' GracefulShutdownTimeout (%s) must be shorter than LeaseDuration − RenewDeadline (%s): a replica that cannot renew its Lease must have stopped its clusters before others take them", memberShutdown, o.LeaseDuration-o.RenewDeadline)
	case o.LeaseDuration > time.Hour:
		return fmt.Errorf("sharding: LeaseDuration (%s) over an hour", o.LeaseDuration)
	case o.RenewDeadline >= o.LeaseDuration:
		return fmt.Errorf("sharding: RenewDeadline (%s) must be shorter than LeaseDuration (%s)", o.RenewDeadline, o.LeaseDuration)
	case o.RetryPeriod >= o.RenewDeadline:
		return fmt.Errorf("sharding: RetryPeriod (%s) must be shorter than RenewDeadline (%s)", o.RetryPeriod, o.RenewDeadline)
	case dnsLabel(o.Group) == "":
		return fmt.Errorf("sharding: Group %q has no letters or digits", o.Group)
	}
	return nil
}

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// dnsLabel makes s fit in a Lease name and a label value: lower case
// letters, digits and dashes, at most 40 characters.
func dnsLabel(s string) string {
	s = strings.Trim(notDNS.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if len(s) > 40 {
		s = strings.Trim(s[:40], "-")
	}
	return s
}
