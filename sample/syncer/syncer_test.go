package main

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mccr-dev/mccr/sample/syncer/api/v1alpha1"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

var prod = map[string]string{"env": "prod"}

// fleetSetting is a FleetSetting selecting the clusters whose env
// property is prod.
func fleetSetting(ns, name string, labels, data map[string]string) *v1alpha1.FleetSetting {
	return &v1alpha1.FleetSetting{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.FleetSettingSpec{
			ClusterSelector: &metav1.LabelSelector{MatchLabels: maps.Clone(prod)},
			Template:        v1alpha1.SettingTemplate{Labels: labels, Data: data},
		},
	}
}

// TestSyncer follows one FleetSetting through its life with the patroller
// out of the way (a period of an hour): everything below happens on
// events. Created on the host, it is copied into both selected members
// and its status says so; updated, every copy follows; a copy's spec
// edited by hand is put back; a member no longer selected loses its copy;
// a member that leaves the fleet leaves the status within 2 s; deleted,
// its copies go and then so does it. Nothing of the Server is left once
// Start has returned.
func TestSyncer(t *testing.T) {
	ns := prepare(t)
	ignore := goleak.IgnoreCurrent()
	srv := newSyncer(t, ns, syncerOptions{PatrolPeriod: time.Hour})
	stop := test.Run(t, srv)
	addReady(t, srv, member("m1", prod), member("m2", prod))
	key := types.NamespacedName{Namespace: ns, Name: "greeting"}
	labels, data := map[string]string{"tier": "gold"}, map[string]string{"greeting": "hello"}

	// Create → a copy in every selected member, and a status that says so.
	// (Timed from the create's return: the test's own client may first
	// have to discover the kind.)
	createIn(t, "host", fleetSetting(ns, key.Name, labels, data))
	begin := time.Now()
	for _, m := range []string{"m1", "m2"} {
		test.Eventually(t, patience, "copy in "+m, func() bool { return hasCopy(t, m, key, data, labels) })
	}
	t.Logf("figure: create on host → copy present in all 2 members: %s", since(begin))
	test.Eventually(t, patience, "status: both Synced", func() bool {
		return maps.Equal(states(t, key), map[string]v1alpha1.SyncState{"m1": v1alpha1.SyncStateSynced, "m2": v1alpha1.SyncStateSynced})
	})
	t.Logf("figure: create on host → host status Synced for both: %s", since(begin))
	var fs v1alpha1.FleetSetting
	getIn(t, "host", key, &fs)
	if fs.Status.Selected != 2 || fs.Status.Synced != 2 || fs.Status.ObservedGeneration != fs.Generation ||
		!slices.Contains(fs.Finalizers, finalizer) {
		t.Fatalf("status %+v, finalizers %v", fs.Status, fs.Finalizers)
	}

	// Update → every copy follows; a key dropped from the template leaves
	// the copies too.
	data = map[string]string{"greeting": "hi", "farewell": "bye"}
	begin = time.Now()
	patchIn(t, "host", &fs, map[string]any{"spec": map[string]any{"template": map[string]any{"data": data}}})
	for _, m := range []string{"m1", "m2"} {
		test.Eventually(t, patience, "update in "+m, func() bool { return hasCopy(t, m, key, data, labels) })
	}
	t.Logf("figure: update on host → every copy updated: %s", since(begin))
	data = map[string]string{"greeting": "hi"}
	patchIn(t, "host", &fs, map[string]any{"spec": map[string]any{"template": map[string]any{"data": map[string]any{"farewell": nil}}}})
	for _, m := range []string{"m1", "m2"} {
		test.Eventually(t, patience, "dropped key gone in "+m, func() bool { return hasCopy(t, m, key, data, labels) })
	}

	// A copy's spec edited by hand in a member → put back by the event.
	begin = time.Now()
	patchIn(t, "m1", &v1alpha1.Setting{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}},
		map[string]any{"spec": map[string]any{"data": map[string]string{"greeting": "tampered", "extra": "x"}}})
	test.Eventually(t, patience, "hand edit repaired", func() bool { return hasCopy(t, "m1", key, data, labels) })
	t.Logf("figure: hand edit of a copy's spec → repaired on its event: %s", since(begin))

	// Selection narrowed to m1 by name → m2's copy is deleted.
	begin = time.Now()
	patchIn(t, "host", &fs, map[string]any{"spec": map[string]any{"clusterSelector": nil, "clusters": []string{"m1"}}})
	test.Eventually(t, patience, "m2's copy deleted", func() bool { return copyIn(t, "m2", key) == nil })
	t.Logf("figure: member deselected → its copy deleted: %s", since(begin))
	test.Eventually(t, patience, "status: m1 only", func() bool {
		return maps.Equal(states(t, key), map[string]v1alpha1.SyncState{"m1": v1alpha1.SyncStateSynced})
	})
	if !hasCopy(t, "m1", key, data, labels) {
		t.Fatal("m1's copy changed when m2 was deselected")
	}

	// Both selected again, then m2 leaves the fleet: its line leaves the
	// status, by the ClusterEvents source (the patroller is an hour away).
	patchIn(t, "host", &fs, map[string]any{"spec": map[string]any{"clusterSelector": map[string]any{"matchLabels": prod}}})
	test.Eventually(t, patience, "status: both Synced again", func() bool {
		return maps.Equal(states(t, key), map[string]v1alpha1.SyncState{"m1": v1alpha1.SyncStateSynced, "m2": v1alpha1.SyncStateSynced})
	})
	if err := srv.Delete("m2"); err != nil {
		t.Fatal(err)
	}
	begin = time.Now()
	test.Eventually(t, patience, "status without m2", func() bool {
		return maps.Equal(states(t, key), map[string]v1alpha1.SyncState{"m1": v1alpha1.SyncStateSynced})
	})
	took := time.Since(begin)
	t.Logf("figure: member deleted (srv.Delete returned) → host status updated: %s", took.Round(time.Millisecond))
	// The patroller is an hour away: a status that follows within seconds
	// was told by the ClusterEvents source. The bound leaves room for a
	// loaded machine.
	if took > 10*time.Second {
		t.Errorf("the host status followed a member's leaving after %s, want within 10s", took)
	}
	getIn(t, "host", key, &fs)
	if fs.Status.Selected != 1 || fs.Status.Synced != 1 {
		t.Errorf("status after m2 left: %+v", fs.Status)
	}

	// Delete → the copy goes, then the FleetSetting. m2 left the fleet
	// and is not waited for: its copy stays.
	begin = time.Now()
	deleteIn(t, "host", &fs)
	test.Eventually(t, patience, "m1's copy deleted", func() bool { return copyIn(t, "m1", key) == nil })
	test.Eventually(t, patience, "FleetSetting released", func() bool { return !getIn(t, "host", key, &v1alpha1.FleetSetting{}) })
	t.Logf("figure: delete on host → copies gone and FleetSetting released: %s", since(begin))
	if copyIn(t, "m2", key) == nil {
		t.Error("the copy in m2, which left the fleet, was deleted")
	}

	if err := stop(); err != nil {
		t.Fatal(err)
	}
	fleet.CloseConnections()
	// Work that ends by itself shortly after a Manager stopped gets 15s;
	// each Find retries for about a second.
	leaked := goleak.Find(ignore)
	for deadline := time.Now().Add(15 * time.Second); leaked != nil && time.Now().Before(deadline); {
		leaked = goleak.Find(ignore)
	}
	if leaked != nil {
		t.Fatal(leaked)
	}
	for _, st := range srv.Statuses() {
		if st.Phase != server.PhaseStopped {
			t.Errorf("%s is %s after Start returned", st.Name, st.Phase)
		}
	}
}

// driftLog records what the patroller reported.
type driftLog struct {
	mu    sync.Mutex
	found map[string][]string // "cluster/namespace/name" → why
}

func (d *driftLog) record(cluster string, key types.NamespacedName, why string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.found[cluster+"/"+key.String()] = append(d.found[cluster+"/"+key.String()], why)
}

func (d *driftLog) reports(cluster string, key types.NamespacedName) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.found[cluster+"/"+key.String()])
}

// TestPatrollerRepairsWhatNoEventTells: with a patrol period of 1s, the
// patroller alone repairs two kinds of drift no event announces to the
// member controller. A copy's label edited by hand changes no generation,
// and the member controller filters such updates out; the patroller finds
// the label and the copy is put back within a period. A member whose
// properties change (Server.Update keeps it running and tells no
// controller) becomes selected; the patroller makes its copy. A selector
// that does not parse leaves the copies as they are, and the status says
// why.
func TestPatrollerRepairsWhatNoEventTells(t *testing.T) {
	ns := prepare(t)
	const period = time.Second
	drift := &driftLog{found: map[string][]string{}}
	srv := newSyncer(t, ns, syncerOptions{PatrolPeriod: period, Drift: drift.record})
	test.Run(t, srv)
	addReady(t, srv, member("m1", prod), member("m2", map[string]string{"env": "dev"}))
	key := types.NamespacedName{Namespace: ns, Name: "patrolled"}
	labels, data := map[string]string{"tier": "gold"}, map[string]string{"k": "v"}
	createIn(t, "host", fleetSetting(ns, key.Name, labels, data))
	test.Eventually(t, patience, "copy in m1", func() bool { return hasCopy(t, "m1", key, data, labels) })
	if copyIn(t, "m2", key) != nil {
		t.Fatal("m2 (env=dev) got a copy")
	}

	// A label edited by hand: no generation change, no member event.
	before := copyIn(t, "m1", key)
	begin := time.Now()
	patchIn(t, "m1", before, map[string]any{"metadata": map[string]any{"labels": map[string]string{"tier": "tampered"}}})
	if after := copyIn(t, "m1", key); after.Generation != before.Generation {
		t.Fatalf("a label edit changed the generation (%d → %d): the member controller would see it as an event", before.Generation, after.Generation)
	}
	test.Eventually(t, 3*period+patience, "label repaired", func() bool { return hasCopy(t, "m1", key, data, labels) })
	took := time.Since(begin)
	t.Logf("figure: hand edit of a copy's label (no event) → repaired by the patroller alone: %s (patrol period %s)", took.Round(time.Millisecond), period)
	if got := drift.reports("m1", key); !slices.Contains(got, "label tier differs") {
		t.Errorf("the patroller reported %q for m1, want it to have found the label", got)
	}
	if took > 2*period+2*time.Second {
		t.Errorf("repaired after %s, want within a patrol period (%s) and a little", took, period)
	}

	// m2's properties change to env=prod: no restart, no event.
	mgr, err := srv.GetManager("m2")
	if err != nil {
		t.Fatal(err)
	}
	begin = time.Now()
	if err := srv.Update(member("m2", prod)); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 3*period+patience, "copy in m2", func() bool { return hasCopy(t, "m2", key, data, labels) })
	t.Logf("figure: member's properties changed → copy made by the patroller: %s (patrol period %s)", since(begin), period)
	if got := drift.reports("m2", key); !slices.Contains(got, "missing") {
		t.Errorf("the patroller reported %q for m2, want the missing copy", got)
	}
	if now, _ := srv.GetManager("m2"); now != mgr {
		t.Error("the properties change restarted m2: its controller was told by its initial list, not the patroller")
	}
	test.Eventually(t, patience, "status: both Synced", func() bool {
		return maps.Equal(states(t, key), map[string]v1alpha1.SyncState{"m1": v1alpha1.SyncStateSynced, "m2": v1alpha1.SyncStateSynced})
	})

	// And back: m2 no longer selected, its copy goes.
	if err := srv.Update(member("m2", map[string]string{"env": "dev"})); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 3*period+patience, "copy gone from m2", func() bool { return copyIn(t, "m2", key) == nil })

	// A selector that does not parse changes nothing in the members; the
	// status says why.
	fs := &v1alpha1.FleetSetting{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}}
	patchIn(t, "host", fs, map[string]any{"spec": map[string]any{"clusterSelector": map[string]any{
		"matchExpressions": []map[string]any{{"key": "env", "operator": "Near"}}}}})
	test.Eventually(t, patience, "status: invalid selector", func() bool {
		getIn(t, "host", key, fs)
		return fs.Status.ObservedGeneration == fs.Generation && strings.HasPrefix(fs.Status.Message, "invalid clusterSelector")
	})
	if !hasCopy(t, "m1", key, data, labels) || len(fs.Status.Clusters) != 1 || fs.Status.Clusters[0].State != v1alpha1.SyncStateSynced {
		t.Errorf("with an invalid selector: m1's copy %+v, status %+v", copyIn(t, "m1", key), fs.Status)
	}
}

// TestLateCRD: a member that does not serve Setting is Ready all the same,
// its controller waits (Status.WaitingFor), the host's status says so,
// and the other member is synced meanwhile. Once the CRD is installed the
// copy arrives, without a restart of the member.
func TestLateCRD(t *testing.T) {
	ns := prepare(t)
	name := "late-" + ns
	if _, err := fleet.Add(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fleet.Remove(name); err != nil {
			t.Error(err)
		}
	})
	fleet.CreateNamespace(t, ns)
	srv := newSyncer(t, ns, syncerOptions{PatrolPeriod: time.Hour})
	test.Run(t, srv)
	addReady(t, srv, member("m1", prod), member(name, prod))
	key := types.NamespacedName{Namespace: ns, Name: "everywhere"}
	data := map[string]string{"k": "v"}
	createIn(t, "host", fleetSetting(ns, key.Name, nil, data))

	test.Eventually(t, patience, "copy in m1", func() bool { return hasCopy(t, "m1", key, data, nil) })
	test.Eventually(t, patience, "Status.WaitingFor names Setting", func() bool {
		st, err := srv.Status(name)
		return err == nil && slices.Contains(st.WaitingFor, settingKind)
	})
	test.Eventually(t, patience, "host status: waiting for the CRD", func() bool {
		return maps.Equal(states(t, key), map[string]v1alpha1.SyncState{"m1": v1alpha1.SyncStateSynced, name: v1alpha1.SyncStateWaitingForCRD})
	})
	if st, _ := srv.Status(name); st.Phase != server.PhaseReady {
		t.Fatalf("the member without the CRD is %s, want Ready", st.Phase)
	}

	begin := time.Now()
	if err := test.InstallCRDs(fleet.Cluster(name).Config, "crd/member"); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, patience, "copy in the late member", func() bool { return hasCopy(t, name, key, data, nil) })
	t.Logf("figure: CRD installed late in a member → copy there: %s", since(begin))
	test.Eventually(t, 2*patience, "host status: both Synced", func() bool {
		return maps.Equal(states(t, key), map[string]v1alpha1.SyncState{"m1": v1alpha1.SyncStateSynced, name: v1alpha1.SyncStateSynced})
	})
	t.Logf("figure: CRD installed late in a member → host status Synced for it: %s", since(begin))
	st, _ := srv.Status(name)
	if st.Phase != server.PhaseReady || st.Restarts != 0 || len(st.WaitingFor) != 0 {
		t.Errorf("late member after its CRD came: phase %s, restarts %d, waiting for %v", st.Phase, st.Restarts, st.WaitingFor)
	}
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
