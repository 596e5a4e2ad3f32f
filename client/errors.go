package client

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	// ErrNoClusterInContext is returned by calls that need one cluster when
	// ctx names none. Reconcile's ctx always names its cluster; elsewhere,
	// derive one with known.WithCluster.
	ErrNoClusterInContext = errors.New("no cluster in context: pick one with known.WithCluster(ctx, name) (the ctx mccr passes to Reconcile already names its cluster)")

	// ErrClusterNotFound is returned for a cluster that is not part of the
	// fleet, or left it during the call.
	ErrClusterNotFound = errors.New("cluster not found")

	// ErrClusterNotReady is returned for a cluster that is part of the
	// fleet but has no running Manager (starting, failed, or restarted
	// during the call); see the Server's status for why.
	ErrClusterNotReady = errors.New("cluster not ready")

	// ErrClusterUnreachable is reported for a cluster that is Ready but
	// whose API server cannot be reached, so its cache may be out of date.
	// Only a fleet-wide List reports it; calls aimed at the cluster alone
	// still go to it (reads answer from its cache, writes fail as the API
	// server is down).
	ErrClusterUnreachable = errors.New("cluster unreachable, its cache may be out of date")

	// ErrClusterElsewhere is returned, with sharding, for a cluster of the
	// fleet that another replica runs. Fleet-wide Lists leave such clusters
	// out: each replica's fan-out client covers its own members.
	ErrClusterElsewhere = errors.New("cluster run by another replica")

	// ErrOutcomeUnknown is returned for a write that was sent to its
	// cluster but whose answer never came: the cluster left the fleet or
	// restarted and the answer did not come within the write's grace
	// (Options.WriteGrace), the connection broke, or the caller's ctx
	// ended; or whose answer was a server error (a 5xx, or a timeout, of
	// the API server or of a gateway in front of it), which does not say
	// whether it was applied. The API server may have applied the write.
	// Read before retrying (see the package documentation); the error
	// names the cluster and wraps the cause (a server error's Status too,
	// so that apierrors.IsTimeout and the like still hold).
	ErrOutcomeUnknown = errors.New("write sent but its outcome is unknown: it may have been applied; read before retrying")

	// ErrFleetPagination is returned by a fleet-wide List with Limit or
	// Continue, which it cannot honour; list one cluster at a time to page.
	ErrFleetPagination = errors.New("fleet-wide List does not support Limit or Continue: list each cluster with known.WithCluster to page")
)

// NotFound returns ErrClusterNotFound for the named cluster.
func NotFound(name string) error {
	return fmt.Errorf("cluster %q: %w", name, ErrClusterNotFound)
}

// NotReady returns ErrClusterNotReady for the named cluster.
func NotReady(name string) error {
	return fmt.Errorf("cluster %q: %w", name, ErrClusterNotReady)
}

// outcomeUnknown returns ErrOutcomeUnknown for a write sent to the named
// cluster, saying why its answer is missing and wrapping the error the
// write ended with.
func outcomeUnknown(name, why string, cause error) error {
	if errors.Is(cause, ErrClusterNotReady) || errors.Is(cause, ErrClusterNotFound) {
		// Those mean that nothing was sent; this write was (a request of
		// it left before another was refused, or as the route ended).
		return fmt.Errorf("cluster %q: %s: %w: %v", name, why, ErrOutcomeUnknown, cause) //nolint:errorlint // not wrapped on purpose, see above
	}
	return fmt.Errorf("cluster %q: %s: %w: %w", name, why, ErrOutcomeUnknown, cause)
}

// Elsewhere returns an *ElsewhereError for the named cluster, naming the
// replica that runs it ("" when none does right now).
func Elsewhere(name, owner string) error {
	return &ElsewhereError{Cluster: name, Owner: owner}
}

// ElsewhereError is the error of a call aimed at a cluster that another
// replica of a sharded Server runs: nothing was sent. errors.Is(err,
// ErrClusterElsewhere) holds, and errors.As gives the replica to ask (a
// webhook on any replica can forward there, or read the cluster with a
// client of its own).
type ElsewhereError struct {
	// Cluster is the cluster's name.
	Cluster string
	// Owner is the Identity of the replica that runs it; "" when none
	// does right now (it is moving between replicas).
	Owner string
}

func (e *ElsewhereError) Error() string {
	if e.Owner == "" {
		return fmt.Sprintf("cluster %q: %s (none right now)", e.Cluster, ErrClusterElsewhere)
	}
	return fmt.Sprintf("cluster %q: %s %q", e.Cluster, ErrClusterElsewhere, e.Owner)
}

// Is makes errors.Is(err, ErrClusterElsewhere) hold.
func (e *ElsewhereError) Is(target error) bool { return target == ErrClusterElsewhere }

// Unreachable returns ErrClusterUnreachable for the named cluster, with
// the error that made it unreachable.
func Unreachable(name string, cause error) error {
	if cause == nil {
		return fmt.Errorf("cluster %q: %w", name, ErrClusterUnreachable)
	}
	return fmt.Errorf("cluster %q: %w: %w", name, ErrClusterUnreachable, cause)
}

// ListError reports the clusters a fleet-wide List could not read. The list
// passed to List still holds the items of every cluster that answered, so a
// caller may use them after checking which clusters are missing. Pass
// &Partial{} to List to get those items with a nil error instead.
type ListError struct {
	// Failed maps each cluster that failed to its error.
	Failed map[string]error
	// Total is how many clusters the List was aimed at.
	Total int
}

func (e *ListError) Error() string {
	names := slices.Sorted(maps.Keys(e.Failed))
	var b strings.Builder
	fmt.Fprintf(&b, "fleet-wide List failed in %d of %d clusters:", len(names), e.Total)
	for i, n := range names {
		if i > 0 {
			b.WriteString(";")
		}
		// Most per-cluster errors name their cluster already.
		msg := fmt.Sprint(e.Failed[n])
		if prefix := fmt.Sprintf("cluster %q: ", n); !strings.HasPrefix(msg, prefix) {
			msg = prefix + msg
		}
		b.WriteString(" ")
		b.WriteString(msg)
	}
	return b.String()
}

// Status lets apierrors' predicates (IsNotFound, IsForbidden, …) and
// client.IgnoreNotFound judge the List as a whole: its reason and code are
// those every failed cluster's error shares, and none when they differ or
// one is no API server's answer. Left to Unwrap, those predicates would
// judge by the first API error among the clusters', and IgnoreNotFound
// would drop a List one cluster answered NotFound while another could not
// be read at all.
func (e *ListError) Status() metav1.Status {
	var reason metav1.StatusReason
	var code int32
	for i, err := range e.Unwrap() {
		var r metav1.StatusReason
		var c int32
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			r, c = status.Status().Reason, status.Status().Code
		}
		switch {
		case i == 0:
			reason, code = r, c
		case r != reason || c != code:
			reason, code = metav1.StatusReasonUnknown, 0
		}
		if reason == metav1.StatusReasonUnknown && code == 0 {
			break
		}
	}
	return metav1.Status{Status: metav1.StatusFailure, Reason: reason, Code: code, Message: e.Error()}
}

// Unwrap returns the per-cluster errors, so errors.Is(err,
// ErrClusterNotReady) and the like see through a ListError.
func (e *ListError) Unwrap() []error {
	out := make([]error, 0, len(e.Failed))
	for _, n := range slices.Sorted(maps.Keys(e.Failed)) {
		out = append(out, e.Failed[n])
	}
	return out
}
