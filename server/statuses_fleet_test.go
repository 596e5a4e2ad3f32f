package server_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// listed returns name's status as Statuses lists it.
func listed(srv *server.Server, name string) (server.ClusterStatus, bool) {
	for _, st := range srv.Statuses() {
		if st.Name == name {
			return st, true
		}
	}
	return server.ClusterStatus{}, false
}

// awaitListed polls Statuses until name's status satisfies ok, and
// returns how long that took.
func awaitListed(t *testing.T, srv *server.Server, name string, within time.Duration, what string, ok func(server.ClusterStatus) bool) time.Duration {
	t.Helper()
	begin := time.Now()
	var last server.ClusterStatus
	test.Eventually(t, within, name+": "+what, func() bool {
		st, found := listed(srv, name)
		last = st
		return found && ok(st)
	})
	took := time.Since(begin)
	t.Logf("%s: %s after %s (phase %s)", name, what, took.Round(time.Millisecond), last.Phase)
	return took
}

// TestStatusesFollowMembers: on real API servers, what Statuses lists of
// each member follows it as it changes: phases as members start, fail and
// leave; Properties updated; the kind a member waits for, gone once its
// CRD is installed; a kind its identity may not read, gone once the rule
// is granted. Each shows as soon as the member's record knows it, with no
// call of Statuses asking the members.
func TestStatusesFollowMembers(t *testing.T) {
	ns := testNamespace(t)
	crd, gvk := widgetCRD(ns)
	const sa = "statuses-sa"
	tok, _ := configMapsOnly(t, "m3", ns, sa)
	r := startServer(t, ns, nil)
	r.srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		nop := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
		if err := ctrl.NewControllerManagedBy(mgr).Named("widgets-" + ns).For(u).Complete(nop); err != nil {
			return err
		}
		return ctrl.NewControllerManagedBy(mgr).Named("secrets-" + ns).For(&corev1.Secret{}).Complete(nop)
	})

	m1 := config.NewNamedConfig("m1", fleet.Cluster("m1").Config)
	m1.Properties = map[string]string{"region": "eu"}
	for _, nc := range []*config.NamedConfig{m1, tokenMember("m3", tok), unreachable(t, "down")} {
		if err := r.srv.Add(nc); err != nil {
			t.Fatal(err)
		}
	}
	widget := gvk.String()
	awaitListed(t, r.srv, "m1", 60*time.Second, "Ready, waiting for Widgets", func(st server.ClusterStatus) bool {
		return st.Phase == server.PhaseReady && slices.Equal(st.WaitingFor, []string{widget}) && st.Properties["region"] == "eu"
	})
	awaitListed(t, r.srv, "m3", 60*time.Second, "Ready, Secrets forbidden", func(st server.ClusterStatus) bool {
		return st.Phase == server.PhaseReady && slices.ContainsFunc(st.Unserved, func(k server.UnservedKind) bool { return k.Kind == "/v1, Kind=Secret" })
	})
	awaitListed(t, r.srv, "down", 30*time.Second, "Failed", func(st server.ClusterStatus) bool {
		return st.Phase == server.PhaseFailed && st.Failures > 0 && st.LastError != nil && !st.NextRetry.IsZero()
	})
	awaitListed(t, r.srv, "m1", 30*time.Second, "probed", func(st server.ClusterStatus) bool {
		return st.Reachable && !st.LastProbe.IsZero()
	})

	// The CRD arrives in m1: its controller stops waiting within a poll of
	// the kind (5s apart at most), and Statuses says so.
	if err := test.InstallCRDObjects(fleet.Cluster("m1").Config, crd); err != nil {
		t.Fatal(err)
	}
	if took := awaitListed(t, r.srv, "m1", 30*time.Second, "no longer waiting", func(st server.ClusterStatus) bool { return len(st.WaitingFor) == 0 }); took > 15*time.Second {
		t.Errorf("Statuses showed m1's Widgets served %s after the CRD was", took.Round(time.Millisecond))
	}

	// The Secret rule is granted in m3.
	admin := adminClient(t, "m3")
	var role rbacv1.Role
	if err := admin.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: sa}, &role); err != nil {
		t.Fatal(err)
	}
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}})
	if err := admin.Update(t.Context(), &role); err != nil {
		t.Fatal(err)
	}
	awaitListed(t, r.srv, "m3", 90*time.Second, "Secrets served", func(st server.ClusterStatus) bool {
		return !slices.ContainsFunc(st.Unserved, func(k server.UnservedKind) bool { return k.Kind == "/v1, Kind=Secret" })
	})

	// Properties change alone: shown at once, no restart.
	changed := config.NewNamedConfig("m1", fleet.Cluster("m1").Config)
	changed.Properties = map[string]string{"region": "us"}
	if err := r.srv.Update(changed); err != nil {
		t.Fatal(err)
	}
	if st, _ := listed(r.srv, "m1"); st.Properties["region"] != "us" || st.Phase != server.PhaseReady {
		t.Errorf("Statuses right after an Update of Properties: %+v", st)
	}

	// Statuses and Status agree on members at rest ("down" is retried
	// meanwhile).
	for _, st := range r.srv.Statuses() {
		if st.Name == "down" {
			continue
		}
		one, err := r.srv.Status(st.Name)
		if err != nil {
			t.Fatal(err)
		}
		if one.Phase != st.Phase || !one.Since.Equal(st.Since) || !maps.Equal(one.Properties, st.Properties) ||
			!slices.Equal(one.WaitingFor, st.WaitingFor) || !slices.Equal(one.Unserved, st.Unserved) || one.Failures != st.Failures {
			t.Errorf("%s: Statuses lists %+v, Status says %+v", st.Name, st, one)
		}
	}

	// Deleted: gone from Statuses when Delete returns.
	for _, name := range []string{"m1", "m3", "down"} {
		if err := r.srv.Delete(name); err != nil {
			t.Fatal(err)
		}
		if _, found := listed(r.srv, name); found {
			t.Errorf("Statuses lists %s after Delete returned", name)
		}
	}
}
