package client_test

import (
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	mcclient "github.com/mccr-dev/mccr/client"
)

// apierrors' predicates judge a fleet-wide List's error as a whole: true
// only when every failed cluster failed that way; errors.Is still sees
// each cluster's error.
func TestListErrorJudgedAsAWhole(t *testing.T) {
	gr := schema.GroupResource{Group: "example.com", Resource: "widgets"}
	notFound := func(c string) error { return fmt.Errorf("cluster %q: %w", c, apierrors.NewNotFound(gr, "")) }
	for _, tc := range []struct {
		name                  string
		failed                map[string]error
		isNotFound, forbidden bool
	}{
		{"all not found", map[string]error{"a": notFound("a"), "b": notFound("b")}, true, false},
		{"not found and unavailable", map[string]error{"a": notFound("a"), "b": apierrors.NewServiceUnavailable("down")}, false, false},
		{"not found and not ready", map[string]error{"a": notFound("a"), "b": fmt.Errorf("cluster %q: %w", "b", mcclient.ErrClusterNotReady)}, false, false},
		{"not ready and not found", map[string]error{"a": fmt.Errorf("cluster %q: %w", "a", mcclient.ErrClusterNotReady), "b": notFound("b")}, false, false},
		{"all forbidden", map[string]error{"a": apierrors.NewForbidden(gr, "", errors.New("no")), "b": apierrors.NewForbidden(gr, "", errors.New("no"))}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error = &mcclient.ListError{Failed: tc.failed, Total: 3}
			if got := apierrors.IsNotFound(err); got != tc.isNotFound {
				t.Errorf("IsNotFound = %v, want %v", got, tc.isNotFound)
			}
			if got := crclient.IgnoreNotFound(err) == nil; got != tc.isNotFound {
				t.Errorf("IgnoreNotFound dropped it: %v, want %v", got, tc.isNotFound)
			}
			if got := apierrors.IsForbidden(err); got != tc.forbidden {
				t.Errorf("IsForbidden = %v, want %v", got, tc.forbidden)
			}
			for c, cerr := range tc.failed {
				if !errors.Is(err, cerr) {
					t.Errorf("errors.Is does not see %s's error", c)
				}
			}
			if _, notReady := tc.failed["b"]; notReady && errors.Is(tc.failed["b"], mcclient.ErrClusterNotReady) && !errors.Is(err, mcclient.ErrClusterNotReady) {
				t.Error("errors.Is(err, ErrClusterNotReady) false")
			}
		})
	}
}
