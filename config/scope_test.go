package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

func TestNewScope(t *testing.T) {
	s, err := NewScope([]string{"team-b", "team-a", "team-b"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"team-a", "team-b"}; !slices.Equal(s.Namespaces, want) || s.ClusterResources {
		t.Errorf("NewScope = %+v, want namespaces %v without cluster resources", s, want)
	}
	if s.Whole() {
		t.Error("a scope of two namespaces is the whole cluster")
	}
	if got, want := s.String(), "namespaces team-a, team-b only"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	s, err = NewScope([]string{"a"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.String(), "namespace a and cluster-scoped kinds"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if s, err := NewScope(nil, true); err != nil || !s.Whole() || s.String() != "the whole cluster" {
		t.Errorf("NewScope(nil, true) = %+v, %v: want the whole cluster", s, err)
	}
}

// TestNewScopeRefusesHostileNamespaces: what is no namespace name is an
// error that wraps ErrInvalidScope and quotes the name escaped and cut,
// never a panic or a flood.
func TestNewScopeRefusesHostileNamespaces(t *testing.T) {
	many := make([]string, MaxScopeNamespaces+1)
	for i := range many {
		many[i] = fmt.Sprintf("ns-%d", i)
	}
	for _, tc := range []struct {
		name       string
		namespaces []string
		quoted     string
	}{
		{"empty", []string{"a", ""}, `""`},
		{"uppercase", []string{"Team-A"}, `"Team-A"`},
		{"odd bytes", []string{"a\x00b\xff\u202e"}, `"a\x00b\xff\u202e"`},
		{"newline", []string{"a\nINFO forged"}, `"a\nINFO forged"`},
		{"too long", []string{strings.Repeat("a", 100)}, `…`},
		{"wildcard", []string{"*"}, `"*"`},
		{"too many", many, fmt.Sprintf("%d namespaces", len(many))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewScope(tc.namespaces, false)
			if !errors.Is(err, ErrInvalidScope) {
				t.Fatalf("NewScope = %+v, %v; want ErrInvalidScope", s, err)
			}
			if !strings.Contains(err.Error(), tc.quoted) || len(err.Error()) > 400 {
				t.Errorf("error %q should quote %s, briefly", err, tc.quoted)
			}
		})
	}
	// The most namespaces allowed pass.
	if _, err := NewScope(many[:MaxScopeNamespaces], false); err != nil {
		t.Fatal(err)
	}
	long := Scope{Namespaces: many[:MaxScopeNamespaces]}
	if got := long.String(); !strings.Contains(got, fmt.Sprintf("and %d more", MaxScopeNamespaces-10)) || len(got) > 200 {
		t.Errorf("String() of %d namespaces = %q: want ten and a count", MaxScopeNamespaces, got)
	}
}

// TestScopeCountsInBothFingerprints: a member's caches are built for one
// scope, so a change of it must restart the member (ReachFingerprint);
// the whole cluster leaves the digests as they were, and the order of the
// names does not count.
func TestScopeCountsInBothFingerprints(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:6443", BearerToken: "tok"}
	plain := NewNamedConfig("a", cfg)
	scoped := func(s Scope) *NamedConfig { return &NamedConfig{Name: "a", Config: cfg, Scope: s} }
	ab := scoped(Scope{Namespaces: []string{"a", "b"}})
	ba := scoped(Scope{Namespaces: []string{"b", "a", "b"}})
	onlyA := scoped(Scope{Namespaces: []string{"a"}})
	abCluster := scoped(Scope{Namespaces: []string{"a", "b"}, ClusterResources: true})
	wholeCluster := scoped(Scope{ClusterResources: true})

	for _, fp := range []func(*NamedConfig) string{(*NamedConfig).Fingerprint, (*NamedConfig).ReachFingerprint} {
		if fp(ab) == fp(plain) || fp(ab) == fp(onlyA) || fp(ab) == fp(abCluster) {
			t.Error("a change of Scope left a digest alone")
		}
		if fp(ab) != fp(ba) {
			t.Error("the same namespaces in another order, or repeated, gave another digest")
		}
		if fp(wholeCluster) != fp(plain) {
			t.Error("cluster resources without namespaces is the whole cluster, and should digest as it")
		}
	}
	if plain.Fingerprint() != plain.ReachFingerprint() {
		t.Error("without Properties the two digests should agree")
	}
}
