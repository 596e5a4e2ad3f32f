package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crrecorder "sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

func TestNoGoroutineLeftAfterStartReturns(t *testing.T) {
	ns := testNamespace(t)
	ignore := goleak.IgnoreCurrent()
	r := startServer(t, ns, nil)
	addReady(t, r.srv, members[:3]...)
	createConfigMap(t, "m1", ns, "x")
	test.Eventually(t, 10*time.Second, "reconciled", func() bool { return ackIn(t, "m1", ns, "x") == "m1" })
	// A cluster deleted while running, one whose start is still failing.
	if err := r.srv.Delete("m3"); err != nil {
		t.Fatal(err)
	}
	if err := r.srv.Add(unreachable(t, "nowhere")); err != nil {
		t.Fatal(err)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	fleet.CloseConnections()
	leakcheck.VerifyNone(t, ignore)
	for _, st := range r.srv.Statuses() {
		if st.Phase != server.PhaseStopped {
			t.Errorf("%s is %s after Start returned", st.Name, st.Phase)
		}
	}
}

func TestOnlyTheLeaderReconciles(t *testing.T) {
	ns := testNamespace(t)
	le := func(o *ctrl.Options) {
		o.LeaderElection = true
		o.LeaderElectionID = "mccr-test-" + ns
		o.LeaderElectionNamespace = "default"
		o.LeaderElectionReleaseOnCancel = true
		o.LeaseDuration = ptr.To(4 * time.Second)
		o.RenewDeadline = ptr.To(3 * time.Second)
		o.RetryPeriod = ptr.To(200 * time.Millisecond)
	}
	a := startServer(t, ns, le)
	b := startServer(t, ns, le)
	for _, r := range []*running{a, b} {
		for _, name := range members[:2] {
			if err := r.srv.Add(fleet.Cluster(name).Named); err != nil {
				t.Fatal(err)
			}
		}
	}
	leads := func(r *running) bool {
		select {
		case <-r.srv.Elected():
		default:
			return false
		}
		st, _ := r.srv.Status("m1")
		return st.Phase == server.PhaseReady
	}
	test.Eventually(t, 30*time.Second, "one server leads", func() bool { return leads(a) || leads(b) })
	leader, standby := a, b
	if leads(b) {
		leader, standby = b, a
	}
	createConfigMap(t, "m1", ns, "while-leading")
	test.Eventually(t, 10*time.Second, "leader reconciles", func() bool { return leader.rec.count("m1", "while-leading") > 0 })
	// The standby runs its members' caches (reads work there); only their
	// controllers wait for leadership.
	waitReady(t, standby.srv, "m1", "m2")
	if n := standby.rec.total("m1") + standby.rec.total("m2"); n != 0 {
		t.Fatalf("standby reconciled %d times", n)
	}

	if err := leader.stop(); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 30*time.Second, "standby takes over", func() bool { return leads(standby) })
	createConfigMap(t, "m2", ns, "after-takeover")
	test.Eventually(t, 10*time.Second, "new leader reconciles", func() bool { return standby.rec.count("m2", "after-takeover") > 0 })
}

// eventReconciler is built per member inside its setup, the way a reconciler
// that holds per-cluster parts (an event recorder) is registered.
type eventReconciler struct {
	client.Client
	events crrecorder.EventRecorder
	seen   *tally
}

func (r *eventReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster, _ := known.ClusterFrom(ctx)
	var cm corev1.ConfigMap
	if err := r.Get(ctx, req.NamespacedName, &cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// The field index registered in the setup exists in this cluster.
	var same corev1.ConfigMapList
	if err := r.List(ctx, &same, client.InNamespace(req.Namespace), client.MatchingFields{"data.owner": cm.Data["owner"]}); err != nil {
		return ctrl.Result{}, err
	}
	r.events.Eventf(&cm, nil, corev1.EventTypeNormal, "Seen", "Reconcile", "seen in %s with %d owned", cluster, len(same.Items))
	r.seen.add(cluster, req.Name)
	return ctrl.Result{}, nil
}

func TestEventsAndFieldIndexesPerCluster(t *testing.T) {
	ns := testNamespace(t)
	r := startServer(t, ns, nil)
	seen := newTally()
	r.srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.ConfigMap{}, "data.owner", func(o client.Object) []string {
			return []string{o.(*corev1.ConfigMap).Data["owner"]}
		})
		if err != nil {
			return err
		}
		rec := &eventReconciler{Client: r.srv.GetClient(), events: mgr.GetEventRecorder("mccr-test"), seen: seen}
		return ctrl.NewControllerManagedBy(mgr).Named("events-" + ns).For(&corev1.ConfigMap{}).Complete(rec)
	})
	addReady(t, r.srv, members[:2]...)
	for _, name := range members[:2] {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owned-" + name, Namespace: ns}, Data: map[string]string{"owner": "me"}}
		if err := adminClient(t, name).Create(context.Background(), cm); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range members[:2] {
		test.Eventually(t, 15*time.Second, "event in "+name, func() bool {
			var list eventsv1.EventList
			if err := adminClient(t, name).List(context.Background(), &list, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			for _, e := range list.Items {
				if e.Regarding.Name == "owned-"+name && strings.Contains(e.Note, "seen in "+name+" with 1 owned") {
					return true
				}
			}
			return false
		})
		var list eventsv1.EventList
		_ = adminClient(t, name).List(context.Background(), &list, client.InNamespace(ns))
		for _, e := range list.Items {
			if !strings.Contains(e.Regarding.Name, "-"+name) {
				t.Errorf("cluster %s holds an event about %s", name, e.Regarding.Name)
			}
		}
	}
}

func TestHostClientManagerAndWithClient(t *testing.T) {
	ns := testNamespace(t)
	r := startServer(t, ns, nil)
	if err := r.srv.Add(fleet.Cluster("m1").Named); err != nil {
		t.Fatal(err)
	}
	if _, err := r.srv.GetManager("m1"); err == nil {
		// Ready this fast would be surprising but not wrong.
		t.Log("m1 already Ready")
	}
	waitReady(t, r.srv, "m1")
	mgr, err := r.srv.GetManager("m1")
	if err != nil || mgr == nil {
		t.Fatalf("GetManager: %v", err)
	}
	if mgr.GetScheme() != r.srv.GetScheme() {
		t.Error("member scheme differs from the server's")
	}
	err = r.srv.WithClient("m1", func(c client.Client) error {
		return c.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "via-withclient", Namespace: ns}})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.srv.WithClient("zz", func(client.Client) error { return nil }); !isNotFound(err) {
		t.Errorf("WithClient(unknown) = %v", err)
	}
	// The host client reaches the host, not a member.
	hostCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "on-host", Namespace: ns}}
	if err := r.srv.GetHostClient().Create(context.Background(), hostCM); err != nil {
		t.Fatal(err)
	}
	var got corev1.ConfigMap
	if err := adminClient(t, "host").Get(context.Background(), client.ObjectKeyFromObject(hostCM), &got); err != nil {
		t.Errorf("host client did not write to the host: %v", err)
	}
	if names := r.srv.ClusterNames(); fmt.Sprint(names) != "[m1]" {
		t.Errorf("ClusterNames = %v", names)
	}
}
