package server

import (
	"errors"
	"time"

	"github.com/mccr-dev/mccr/config"
	membermgr "github.com/mccr-dev/mccr/internal/member"
)

// ErrSetupFailed is wrapped by a member's ClusterStatus.LastError when its
// last start failed because a reconciler setup given to AddReconcilerSetup
// returned an error or panicked (the setup's own error is wrapped too, and
// the message names the setup). The member is Failed and retried with
// backoff like any failure; SetupReadyCheck turns the case where setups
// fail on every member into a failing readiness check.
var ErrSetupFailed = errors.New("reconciler setup failed")

// ErrOutOfScope is wrapped by the errors of cached reads a member does not
// serve because its scope (config.NamedConfig.Scope: some namespaces, with
// or without cluster-scoped kinds) leaves them out: a Get or List of a
// cluster-scoped kind without cluster resources, or in a namespace outside
// the scope. Nothing was sent to the cluster. (Uncached reads and writes
// go to the cluster, whose RBAC answers them.) A fleet-wide List of such a
// kind fails with it unless it asks for client.Partial results. It is also wrapped by
// ClusterStatus.LastError when the cache options given to NewServer watch
// no namespace of a member's scope (DefaultNamespaces, or a ByObject
// entry's namespaces): that member does not start.
var ErrOutOfScope = membermgr.ErrOutOfScope

// Phase is where a member cluster is in its lifecycle.
type Phase string

const (
	// PhasePending means added, waiting for the Server to start (or, with
	// Options.ColdStandby, to lead).
	PhasePending Phase = "Pending"
	// PhaseQueued means waiting for a start slot: Options.MaxConcurrentStarts
	// members are in their starts; this one begins when a slot frees.
	// Never seen with a negative MaxConcurrentStarts.
	PhaseQueued Phase = "Queued"
	// PhaseStarting means checking reachability and credentials, building
	// the Manager and running reconciler setups.
	PhaseStarting Phase = "Starting"
	// PhaseSyncing means the Manager runs; caches are filling.
	PhaseSyncing Phase = "Syncing"
	// PhaseReady means caches synced, controllers reconciling, the fan-out
	// client routes to it. On a replica that does not lead (leader
	// election), the member is Ready as soon as its caches have synced:
	// reads and webhooks are served, and its controllers start once the
	// replica leads.
	PhaseReady Phase = "Ready"
	// PhaseUnreachable means the member was Ready, then its API server stopped
	// answering. Its caches still serve what they last saw (fleet-wide Lists
	// report it as failed); once the API server answers, the member restarts
	// to resync, by itself.
	PhaseUnreachable Phase = "Unreachable"
	// PhaseFailed means the last start failed or the member lost its
	// credentials; it is retried at NextRetry.
	PhaseFailed Phase = "Failed"
	// PhaseStopping means being replaced by an Update, or the Server is
	// shutting down. A deleted cluster leaves Status, Statuses and
	// ClusterNames at once (ErrClusterNotFound), while its Manager stops;
	// Delete returns once it has, and the name may be added again
	// meanwhile.
	PhaseStopping Phase = "Stopping"
	// PhaseStopped means the Server stopped (or lost leadership) and so did
	// the member.
	PhaseStopped Phase = "Stopped"
	// PhaseElsewhere means another replica runs the member (sharding; see
	// ClusterStatus.Owner), or none does yet.
	PhaseElsewhere Phase = "Elsewhere"
)

// ClusterStatus is a member cluster's state as the Server sees it.
//
// The Server publishes it whenever it changes, so Status and Statuses
// read it without asking the member. Status gives the caller its own
// copies of Properties, WaitingFor and Unserved. Statuses gives every
// caller the same ones: read them, and copy them before changing them (a
// copy of each for every member on every call would cost more than the rest
// of the call). What a caller does to them never reaches what Status,
// ClusterProperties or the Server itself hold.
type ClusterStatus struct {
	// Name is the cluster's name.
	Name string
	// Source is where its config came from.
	Source config.Source
	// Owner is, with sharding, the replica that runs the member when it is
	// not this one ("" when this replica runs it, or none does yet).
	Owner string
	// Properties are what its source says about it (config.NamedConfig.
	// Properties): from Status a copy, from Statuses shared (read-only).
	Properties map[string]string
	// Phase and when it was entered.
	Phase Phase
	Since time.Time
	// LastError is the error of the last failed start, or the last watch
	// error of a running member (for example while its API server is
	// unreachable; a running member's Manager retries by itself). Nil after
	// a clean start. A failed reconciler setup wraps ErrSetupFailed.
	// Secrets are redacted from it (config.RedactError).
	LastError error
	// NextRetry is when a Failed member is started again.
	NextRetry time.Time
	// Failures counts failed starts and credential losses.
	Failures int
	// Restarts counts starts after the first one (retries, credential
	// losses). An Update replaces the member and starts counting afresh.
	Restarts int
	// TimeToReady is how long the last successful start took, from the
	// reachability check to synced caches.
	TimeToReady time.Duration
	// WaitingFor lists the kinds ("example.com/v1, Kind=Widget") that
	// controllers of the running member watch but its API server does not
	// serve yet (a CRD not installed there). The member is Ready and its
	// other controllers run; each waiting controller starts within seconds
	// of its kind being served, without a restart. A host kind
	// (HostKind, HostObject) the host cluster does not serve yet is listed
	// with a " (host)" suffix: "example.com/v1, Kind=Policy (host)".
	WaitingFor []string
	// Unserved lists, sorted by kind, the kinds the running member does
	// not serve and why: a cluster-scoped kind a controller watches while
	// the member's scope (config.NamedConfig.Scope) leaves cluster-scoped
	// kinds out, the reason naming the scope and its source (an Argo CD
	// cluster Secret, say); or a kind the member's identity may not list
	// or watch (RBAC), until the rule is granted. The member is Ready and
	// its other controllers run. A host kind (HostKind, HostObject) the
	// host's identity may not list or watch is listed too, with a
	// " (host)" suffix, until the host Manager is granted the rule. A
	// controller of a kind outside the scope
	// starts only once a new scope allows it, which restarts the member.
	Unserved []UnservedKind
	// Reachable is whether the member's API server answered its last
	// reachability probe (Options.ReachProbeInterval). A probe runs through
	// the member's own transport whether or not any watch is open, so a
	// silent API server is noticed even by a member that watches nothing.
	// False until the first probe of a running member.
	Reachable bool
	// LastProbe is when the last probe finished (zero before the first),
	// and ProbeLatency how long it took (up to Options.ReachProbeTimeout
	// when it got no answer).
	LastProbe    time.Time
	ProbeLatency time.Duration
}

// UnservedKind is a kind a member does not serve (ClusterStatus.Unserved).
type UnservedKind struct {
	// Kind is the kind as schema.GroupVersionKind prints it
	// ("rbac.authorization.k8s.io/v1, Kind=ClusterRole"); a kind only
	// client-go's reflector has named shows as its Go type ("*v1.Secret").
	Kind string
	// Reason says why it is not served.
	Reason string
}

// kindsReporter is a member's Manager (membermgr.Manager) as its record
// reads it for WaitingFor and Unserved: the reports take only the member's
// leaf locks, and OnKindsChanged tells when to read them again.
type kindsReporter interface {
	WaitingKinds() []string
	UnservedKinds() []membermgr.UnservedKind
	OnKindsChanged(func())
}

// unservedKinds is what ClusterStatus.Unserved shows of a member's report.
func unservedKinds(kinds []membermgr.UnservedKind) []UnservedKind {
	if len(kinds) == 0 {
		return nil
	}
	out := make([]UnservedKind, len(kinds))
	for i, k := range kinds {
		out[i] = UnservedKind{Kind: k.Kind, Reason: k.Reason}
	}
	return out
}
