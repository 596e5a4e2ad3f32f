package main

import (
	"maps"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mccr-dev/mccr/sample/syncer/api/v1alpha1"
)

// TestPlan: what a member's copy needs, for every case the member
// controller and the patroller meet, without an API server.
func TestPlan(t *testing.T) {
	spec := func(mutate func(*v1alpha1.FleetSetting)) *v1alpha1.FleetSetting {
		fs := fleetSetting("ns", "s", map[string]string{"tier": "gold"}, map[string]string{"k": "v"})
		fs.Generation = 3
		if mutate != nil {
			mutate(fs)
		}
		return fs
	}
	synced := func(mutate func(*v1alpha1.Setting)) *v1alpha1.Setting {
		u, err := desiredCopy(spec(nil))
		if err != nil {
			t.Fatal(err)
		}
		cp := &v1alpha1.Setting{ObjectMeta: metav1.ObjectMeta{Labels: u.GetLabels(), Annotations: u.GetAnnotations()}}
		cp.Spec.Data = map[string]string{"k": "v"}
		if mutate != nil {
			mutate(cp)
		}
		return cp
	}
	now := metav1.Now()
	for _, tc := range []struct {
		name  string
		fs    *v1alpha1.FleetSetting
		cp    *v1alpha1.Setting
		props map[string]string
		want  action
		why   string
	}{
		{name: "nothing at all", want: keep},
		{name: "orphan copy", cp: synced(nil), want: remove, why: "its FleetSetting is gone"},
		{name: "someone else's Setting", fs: spec(nil), props: prod,
			cp: synced(func(cp *v1alpha1.Setting) { delete(cp.Labels, managedByLabel) }), want: keep},
		{name: "being deleted", fs: spec(func(fs *v1alpha1.FleetSetting) {
			fs.DeletionTimestamp = &now
		}), cp: synced(nil), props: prod, want: remove, why: "its FleetSetting is being deleted"},
		{name: "selected, no copy", fs: spec(nil), props: prod, want: write, why: "missing"},
		{name: "selected by name", fs: spec(func(fs *v1alpha1.FleetSetting) {
			fs.Spec.ClusterSelector, fs.Spec.Clusters = nil, []string{"m1"}
		}), want: write, why: "missing"},
		{name: "empty selector selects all", fs: spec(func(fs *v1alpha1.FleetSetting) {
			fs.Spec.ClusterSelector = &metav1.LabelSelector{}
		}), want: write, why: "missing"},
		{name: "not selected, no copy", fs: spec(nil), props: map[string]string{"env": "dev"}, want: keep},
		{name: "not selected, copy", fs: spec(nil), cp: synced(nil), want: remove, why: "the cluster is not selected"},
		{name: "in sync", fs: spec(nil), cp: synced(nil), props: prod, want: keep},
		{name: "someone else's label", fs: spec(nil), props: prod,
			cp: synced(func(cp *v1alpha1.Setting) { cp.Labels["owner"] = "team" }), want: keep},
		{name: "older generation", fs: spec(func(fs *v1alpha1.FleetSetting) { fs.Generation = 4 }),
			cp: synced(nil), props: prod, want: write, why: "written from generation 3, not 4"},
		{name: "data edited", fs: spec(nil), props: prod,
			cp: synced(func(cp *v1alpha1.Setting) { cp.Spec.Data["extra"] = "x" }), want: write, why: "spec.data differs"},
		{name: "label edited", fs: spec(nil), props: prod,
			cp: synced(func(cp *v1alpha1.Setting) { cp.Labels["tier"] = "x" }), want: write, why: "label tier differs"},
		{name: "invalid selector leaves the copy", fs: spec(func(fs *v1alpha1.FleetSetting) {
			fs.Spec.ClusterSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Near"}}
		}), cp: synced(nil), props: prod, want: keep},
		{name: "invalid selector, being deleted", fs: spec(func(fs *v1alpha1.FleetSetting) {
			fs.Spec.ClusterSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Near"}}
			fs.DeletionTimestamp = &now
		}), cp: synced(nil), props: prod, want: remove, why: "its FleetSetting is being deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := plan(tc.fs, tc.cp, "m1", tc.props)
			if got != tc.want || why != tc.why {
				t.Errorf("plan = %v %q, want %v %q", got, why, tc.want, tc.why)
			}
		})
	}
}

// TestDeepCopy: a copy shares no map, slice or pointer with its original.
func TestDeepCopy(t *testing.T) {
	fs := fleetSetting("ns", "s", map[string]string{"a": "1"}, map[string]string{"k": "v"})
	fs.Spec.Clusters = []string{"m1"}
	fs.Status.Clusters = []v1alpha1.ClusterSync{{Name: "m1", State: v1alpha1.SyncStateSynced}}
	list := &v1alpha1.FleetSettingList{Items: []v1alpha1.FleetSetting{*fs}}
	cp := list.DeepCopy()
	if !equality.Semantic.DeepEqual(cp, list) {
		t.Fatal("the copy differs from the original")
	}
	c := &cp.Items[0]
	c.Spec.Clusters[0], c.Spec.ClusterSelector.MatchLabels["env"] = "x", "x"
	c.Spec.Template.Labels["a"], c.Spec.Template.Data["k"] = "x", "x"
	c.Status.Clusters[0].State = v1alpha1.SyncStatePending
	o := &list.Items[0]
	if o.Spec.Clusters[0] != "m1" || !maps.Equal(o.Spec.ClusterSelector.MatchLabels, prod) ||
		o.Spec.Template.Labels["a"] != "1" || o.Spec.Template.Data["k"] != "v" || o.Status.Clusters[0].State != v1alpha1.SyncStateSynced {
		t.Errorf("changing the copy changed the original: %+v", o)
	}

	var none *v1alpha1.FleetSetting
	if o := none.DeepCopyObject(); o != nil {
		t.Errorf("DeepCopyObject of nil = %#v, want nil", o)
	}

	s := &v1alpha1.SettingList{Items: []v1alpha1.Setting{{Spec: v1alpha1.SettingSpec{Data: map[string]string{"k": "v"}}}}}
	sc := s.DeepCopy()
	sc.Items[0].Spec.Data["k"] = "x"
	if s.Items[0].Spec.Data["k"] != "v" {
		t.Error("changing a Setting's copy changed the original")
	}
}
