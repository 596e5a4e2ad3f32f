package configwatcher_test

import (
	"maps"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/apis/clusterinventory"
	clusterinventorycrd "github.com/mccr-dev/mccr/apis/clusterinventory/crd"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/test"
)

// managedProfile is a ClusterProfile as a cluster manager writes it:
// apiVersion v1alpha2, the cluster-manager label and spec, the member ID
// label when memberID is set, and a status with ControlPlaneHealthy and
// (unless joined is "") Joined conditions carrying reasons and times, the
// Kubernetes version, a property with its lastObservedTime, and access.
func managedProfile(ns, name, manager, memberID string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": clusterinventory.Group + "/" + clusterinventory.V1Alpha2,
		"kind":       clusterinventory.Kind,
		"metadata":   map[string]any{"namespace": ns, "name": name},
		"spec":       map[string]any{"displayName": name, "clusterManager": map[string]any{"name": manager}},
	}}
	lbls := map[string]string{clusterinventory.LabelClusterManager: manager}
	if memberID != "" {
		lbls[clusterinventory.LabelInventoryMemberID] = memberID
	}
	u.SetLabels(lbls)
	return u
}

// managedStatus is the status a cluster manager writes: healthy and joined
// are the statuses of ControlPlaneHealthy and Joined ("" leaves Joined
// out, as managers that predate it do).
func managedStatus(healthy, joined string, access map[string]any) map[string]any {
	now := time.Now().UTC().Format(time.RFC3339)
	conds := []any{map[string]any{
		"type": clusterinventory.ConditionControlPlaneHealthy, "status": healthy, "reason": "Probed",
		"message": "the API server answers /readyz", "lastTransitionTime": now, "observedGeneration": int64(1),
	}}
	if joined != "" {
		conds = append(conds, map[string]any{
			"type": clusterinventory.ConditionJoined, "status": joined, "reason": "Registered",
			"message": "the cluster is under management", "lastTransitionTime": now,
		})
	}
	return map[string]any{
		"conditions": conds,
		"version":    map[string]any{"kubernetes": "v1.37.1"},
		"properties": []any{map[string]any{
			"name": "topology.kubernetes.io/region", "value": "eu-west-1", "lastObservedTime": now,
		}},
		"accessProviders": []any{access},
	}
}

// createManaged creates u, then sets its status through the status
// subresource, as a cluster manager does.
func createManaged(t *testing.T, c client.Client, u *unstructured.Unstructured, status map[string]any) *unstructured.Unstructured {
	t.Helper()
	if err := c.Create(t.Context(), u); err != nil {
		t.Fatal(err)
	}
	setProfileStatus(t, c, u, func(s map[string]any) { maps.Copy(s, status) })
	return u
}

// setConditions rewrites a profile's conditions as its manager does.
func setConditions(t *testing.T, c client.Client, u *unstructured.Unstructured, healthy, joined string) {
	t.Helper()
	setProfileStatus(t, c, u, func(s map[string]any) {
		s["conditions"] = managedStatus(healthy, joined, nil)["conditions"]
	})
}

func source(ns, name string) string { return "ClusterProfile " + ns + "/" + name }

// testMembers: two cluster managers, in two namespaces, each write a
// profile of one cluster with the same inventory member ID. They are one
// member, named after the ID, served by the first; no duplicate is
// reported. The serving profile's control plane turning unhealthy hands
// the member to the healthy one (Updated, its access); the first healthy
// again takes nothing back. The serving profile deleted hands the member
// back without it leaving: an Update with a restart where the access
// differs, an Update of the properties alone where it is the same. The
// last profile's Joined turning False makes the member leave.
func (e *clusterProfileEnv) testMembers(t *testing.T) {
	ns1, ns2 := e.namespace(t, e.hostClient), e.namespace(t, e.hostClient)
	r := e.watch(t, e.host.Config, configwatcher.WithClusterProfileNamespaces(ns1, ns2))
	const id = "prod-east"
	e.writeToken(t, id, e.token, 0)

	ocm := createManaged(t, e.hostClient, managedProfile(ns1, "prod-east", "open-cluster-management", id),
		managedStatus("True", "True", e.access(cpTokenFile, id, nil)))
	ev := r.event(configwatcher.Added, id)
	if ev.Config.Source.Object != source(ns1, "prod-east") {
		t.Errorf("served from %s", ev.Config.Source)
	}
	want := map[string]string{
		"topology.kubernetes.io/region":                                             "eu-west-1",
		configwatcher.LabelPropertyPrefix + clusterinventory.LabelClusterManager:    "open-cluster-management",
		configwatcher.LabelPropertyPrefix + clusterinventory.LabelInventoryMemberID: id,
		configwatcher.ClusterProfileProperty:                                        ns1 + "/prod-east",
	}
	if !maps.Equal(ev.Config.Properties, want) {
		t.Errorf("Properties = %v, want %v", ev.Config.Properties, want)
	}
	e.reaches(t, ev.Config, id, cpTokenFile)
	first := ev.Config

	// The second manager's profile: no event, no duplicate.
	fleet := createManaged(t, e.hostClient, managedProfile(ns2, "fleet-prod-east", "fleet", id),
		managedStatus("True", "True", e.access(cpOther, id, nil)))
	r.settled()

	setConditions(t, e.hostClient, ocm, "False", "True")
	ev = r.event(configwatcher.Updated, id)
	if ev.Config.Source.Object != source(ns2, "fleet-prod-east") || ev.Config.ReachFingerprint() == first.ReachFingerprint() {
		t.Errorf("after the failover: served from %s, access changed %v", ev.Config.Source, ev.Config.ReachFingerprint() != first.ReachFingerprint())
	}
	e.reaches(t, ev.Config, id, cpOther)
	setConditions(t, e.hostClient, ocm, "True", "True")
	r.settled()

	remove(t, e.hostClient, fleet)
	ev = r.event(configwatcher.Updated, id)
	if ev.Config.Source.Object != source(ns1, "prod-east") || ev.Config.ReachFingerprint() != first.ReachFingerprint() {
		t.Errorf("after the handover: served from %s, access as first %v", ev.Config.Source, ev.Config.ReachFingerprint() == first.ReachFingerprint())
	}

	// A twin with the same access: the handover changes the properties
	// only, which a Server applies without a restart.
	twin := createManaged(t, e.hostClient, managedProfile(ns2, "twin", "fleet", id),
		managedStatus("True", "", e.access(cpTokenFile, id, nil)))
	r.settled()
	remove(t, e.hostClient, ocm)
	ev = r.event(configwatcher.Updated, id)
	if ev.Config.ReachFingerprint() != first.ReachFingerprint() || ev.Config.Properties[configwatcher.ClusterProfileProperty] != ns2+"/twin" {
		t.Errorf("after the handover to the twin: access changed %v, properties %v", ev.Config.ReachFingerprint() != first.ReachFingerprint(), ev.Config.Properties)
	}

	setConditions(t, e.hostClient, twin, "True", "False")
	r.event(configwatcher.Deleted, id)
	r.settled()
}

// testJoined: a profile whose Joined condition is False does not join,
// even with PublishUnhealthy; True or Unknown, it joins as one without the
// condition does; turning False, it leaves, and True again, it comes back.
func (e *clusterProfileEnv) testJoined(t *testing.T) {
	ns := e.namespace(t, e.hostClient)
	r := e.watch(t, e.host.Config, configwatcher.WithClusterProfileNamespaces(ns), configwatcher.PublishUnhealthy())
	e.writeToken(t, "joined", e.token, 0)
	u := createManaged(t, e.hostClient, managedProfile(ns, "joined", "ocm", ""),
		managedStatus("True", "False", e.access(cpTokenFile, "joined", nil)))
	r.settled()
	setConditions(t, e.hostClient, u, "True", "Unknown")
	ev := r.event(configwatcher.Added, ns+"/joined")
	e.reaches(t, ev.Config, "joined", cpTokenFile)
	setConditions(t, e.hostClient, u, "True", "True")
	r.settled()
	setConditions(t, e.hostClient, u, "Unknown", "False")
	r.event(configwatcher.Deleted, ns+"/joined")
	r.settled()
	setConditions(t, e.hostClient, u, "True", "True")
	r.event(configwatcher.Added, ns+"/joined")
}

// testVersions: the host serves both versions. The default watcher reads
// v1alpha2, one pinned to v1alpha1 reads v1alpha1; a profile written as
// v1alpha2 reaches its cluster through either. A profile that lists its
// access only in v1alpha1's deprecated credentialProviders is a cluster
// through v1alpha1 only: the host leaves that field out of v1alpha2, where
// the profile lists no access yet.
func (e *clusterProfileEnv) testVersions(t *testing.T) {
	ns := e.namespace(t, e.hostClient)
	v2 := e.watch(t, e.host.Config, configwatcher.WithClusterProfileNamespaces(ns))
	v1 := e.watch(t, e.host.Config, configwatcher.WithClusterProfileNamespaces(ns), configwatcher.WithClusterProfileVersion(clusterinventory.V1Alpha1))
	e.writeToken(t, "v2", e.token, 0)
	createManaged(t, e.hostClient, managedProfile(ns, "v2", "ocm", ""), managedStatus("True", "True", e.access(cpTokenFile, "v2", nil)))
	for _, r := range []*recorder{v2, v1} {
		ev := r.event(configwatcher.Added, ns+"/v2")
		e.reaches(t, ev.Config, "v2", cpTokenFile)
	}

	e.writeToken(t, "old", e.token, 0)
	createClusterProfile(t, e.hostClient, ns, "old", nil, map[string]any{
		"conditions":          cpConditions("True"),
		"credentialProviders": []any{e.access(cpTokenFile, "old", nil)},
	})
	ev := v1.event(configwatcher.Added, ns+"/old")
	e.reaches(t, ev.Config, "old", cpTokenFile)
	// To the v1alpha2 watcher it lists no access yet: it waits, silently,
	// as for a cluster manager that has not written it.
	v1.settled()
	v2.settled()

	if _, err := configwatcher.NewClusterProfileWatcher(e.host.Config, configwatcher.WithAccessProvidersFile(e.providersFile),
		configwatcher.WithClusterProfileVersion("v1beta1")); err == nil {
		t.Error("an unknown version was accepted")
	}
}

// testCRDLateAndUpgraded: the member, which serves no ClusterProfiles,
// stands in for the host. The watcher starts anyway and reports
// ErrClusterProfileNotInstalled; the upstream CRD of before v1alpha2 is
// installed 2 s later, and the watcher serves a profile within 5 s of the
// CRD's creation, reading v1alpha1. The CRD is then upgraded to the one
// serving v1alpha2 as well: the watcher goes on reading v1alpha1, and sees
// every change.
func (e *clusterProfileEnv) testCRDLateAndUpgraded(t *testing.T) {
	memberClient, err := client.New(e.member.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns := e.namespace(t, memberClient)
	r := e.watch(t, e.member.Config, configwatcher.WithClusterProfileNamespaces(ns))
	r.err(configwatcher.ErrClusterProfileNotInstalled, e.member.Config.Host, "clusterprofiles.multicluster.x-k8s.io")
	time.Sleep(2 * time.Second) // the CRD comes late; nothing is asserted of the wait

	old, err := clusterinventorycrd.ClusterProfileV1Alpha1()
	if err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	if err := test.InstallCRDObjects(e.member.Config, old); err != nil {
		t.Fatal(err)
	}
	e.writeToken(t, "self", e.token, 0)
	u := createClusterProfile(t, memberClient, ns, "self", nil, cpStatus("True", nil, e.access(cpTokenFile, "self", nil)))
	ev := r.event(configwatcher.Added, ns+"/self")
	late := time.Since(created)
	t.Logf("figure: ClusterProfile CRD created 2s after the watcher started → first Added event: %s", late.Round(time.Millisecond))
	// Discovery is asked every 2 s at most; the rest is this test's own
	// writes and the watch, with room for a loaded machine.
	if late > 10*time.Second {
		t.Errorf("the CRD was created %s before the first Added event, want at most 10s", late.Round(time.Millisecond))
	}
	e.reaches(t, ev.Config, "self", cpTokenFile)

	// The upgrade: the CRD now serves v1alpha2 too.
	upgraded, err := clusterinventorycrd.ClusterProfile()
	if err != nil {
		t.Fatal(err)
	}
	var have apiextensionsv1.CustomResourceDefinition
	if err := memberClient.Get(t.Context(), client.ObjectKeyFromObject(upgraded), &have); err != nil {
		t.Fatal(err)
	}
	upgraded.ResourceVersion = have.ResourceVersion
	if err := memberClient.Update(t.Context(), upgraded); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, kfPatience, "v1alpha2 served", func() bool {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(clusterinventory.GroupVersionKind(clusterinventory.V1Alpha2).GroupVersion().WithKind("ClusterProfileList"))
		return memberClient.List(t.Context(), l, client.InNamespace(ns)) == nil
	})
	setProfileStatus(t, memberClient, u, func(s map[string]any) {
		s["credentialProviders"] = s["accessProviders"]
		delete(s, "accessProviders")
		s["properties"] = cpProperties(map[string]string{"upgraded": "yes"})
	})
	ev = r.event(configwatcher.Updated, ns+"/self")
	if ev.Config.Properties["upgraded"] != "yes" {
		t.Errorf("Properties = %v", ev.Config.Properties)
	}
	e.writeToken(t, "after", e.token, 0)
	createManaged(t, memberClient, managedProfile(ns, "after", "ocm", ""), managedStatus("True", "True", e.access(cpTokenFile, "after", nil)))
	ev = r.event(configwatcher.Added, ns+"/after")
	e.reaches(t, ev.Config, "after", cpTokenFile)
	r.settled()
}
