package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// MaxScopeNamespaces is the most namespaces a Scope may name. A member
// opens one list and watch per namespace for every kind its controllers
// watch, so a scope of thousands of namespaces costs the member and its
// API server more than watching the whole cluster would; a source that
// lists that many is refused (ErrInvalidScope) rather than obeyed.
const MaxScopeNamespaces = 1000

// ErrInvalidScope is wrapped by NewScope's and Scope.Validate's errors: a
// namespace that is no namespace name, or too many of them.
var ErrInvalidScope = errors.New("invalid cluster scope")

// Scope is the part of a cluster a member watches. The zero value is the
// whole cluster. With Namespaces, the member's caches list and watch
// namespaced kinds in those namespaces only, and cluster-scoped kinds
// (Namespaces, ClusterRoles, CRDs, …) only with ClusterResources.
//
// A source sets it when the credentials it hands out are good for part of
// a cluster only. Argo CD registers a cluster "for some namespaces"
// (`argocd cluster add --namespace a --namespace b`) by binding its
// ServiceAccount to a Role in each of them, and says so in its cluster
// Secret; a member that watched the whole cluster with that token would be
// refused every list at cluster scope and sit Ready without reconciling
// anything. Any source, or a config added by hand, may set a Scope.
//
// Use NewScope to make one from outside data. Treat it as read-only once
// it is part of a published NamedConfig.
type Scope struct {
	// Namespaces are the namespaces watched, sorted and without
	// duplicates (NewScope makes them so); none means every namespace.
	Namespaces []string
	// ClusterResources lets a member restricted to Namespaces watch
	// cluster-scoped kinds too. Without Namespaces it means nothing: the
	// whole cluster is watched anyway.
	ClusterResources bool
}

// NewScope returns the scope of the given namespaces (every namespace when
// there are none), sorted and without duplicates, and whether cluster-scoped
// kinds are watched with them. Each namespace must be a namespace name
// (a DNS-1123 label); the error, which wraps ErrInvalidScope, quotes the
// first that is not, escaped and shortened.
func NewScope(namespaces []string, clusterResources bool) (Scope, error) {
	s := Scope{ClusterResources: clusterResources}
	if len(namespaces) == 0 {
		return s, nil
	}
	s.Namespaces = slices.Clone(namespaces)
	slices.Sort(s.Namespaces)
	s.Namespaces = slices.Compact(s.Namespaces)
	if err := s.Validate(); err != nil {
		return Scope{}, err
	}
	return s, nil
}

// Validate checks every namespace of s and their number. Sources that build
// a Scope with NewScope need not call it; a Server's member checks it
// again before it builds its caches.
func (s Scope) Validate() error {
	if len(s.Namespaces) > MaxScopeNamespaces {
		return fmt.Errorf("%w: %d namespaces, more than %d", ErrInvalidScope, len(s.Namespaces), MaxScopeNamespaces)
	}
	for _, ns := range s.Namespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("%w: namespace %s is not a namespace name: %s", ErrInvalidScope, QuoteName(ns), errs[0])
		}
	}
	return nil
}

// Whole reports whether s is the whole cluster: no namespaces named.
func (s Scope) Whole() bool { return len(s.Namespaces) == 0 }

// String describes s for messages: "the whole cluster", or "namespaces
// a, b" followed by "and cluster-scoped kinds" or "only". Long lists are
// cut after ten names.
func (s Scope) String() string {
	if s.Whole() {
		return "the whole cluster"
	}
	const shown = 10
	names := s.Namespaces
	more := ""
	if len(names) > shown {
		names, more = names[:shown], fmt.Sprintf(" and %d more", len(s.Namespaces)-shown)
	}
	quoted := make([]string, len(names))
	for i, ns := range names {
		quoted[i] = quoteIfOdd(ns)
	}
	what := "namespace"
	if len(s.Namespaces) > 1 {
		what = "namespaces"
	}
	tail := " only"
	if s.ClusterResources {
		tail = " and cluster-scoped kinds"
	}
	return what + " " + strings.Join(quoted, ", ") + more + tail
}

// fingerprint is what Fingerprint covers of s; nil for the whole cluster,
// which leaves digests as they were before scopes existed. The names are
// sorted, so that a Scope made without NewScope fingerprints the same for
// the same set.
func (s Scope) fingerprint() any {
	if s.Whole() {
		return nil
	}
	names := slices.Clone(s.Namespaces)
	slices.Sort(names)
	return struct {
		Namespaces       []string
		ClusterResources bool
	}{slices.Compact(names), s.ClusterResources}
}
