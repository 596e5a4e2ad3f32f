package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// overlapWitness watches Reconcile calls of several Servers that run the
// same members: per cluster, how many are in flight across all of them,
// the most ever seen at once, and per Server and cluster when its
// reconciles began and ended.
type overlapWitness struct {
	mu       sync.Mutex
	live     map[string]map[string]int             // cluster → server → in flight
	max      map[string]int                        // cluster → most in flight at once
	overlaps map[string][]string                   // cluster → the first few overlaps seen
	track    map[string]map[string]*reconcileTrack // server → cluster
}

type reconcileTrack struct {
	live, total     int
	first, lastExit time.Time
}

func newOverlapWitness() *overlapWitness {
	return &overlapWitness{
		live:     map[string]map[string]int{},
		max:      map[string]int{},
		overlaps: map[string][]string{},
		track:    map[string]map[string]*reconcileTrack{},
	}
}

func (w *overlapWitness) trackLocked(srv, cluster string) *reconcileTrack {
	if w.track[srv] == nil {
		w.track[srv] = map[string]*reconcileTrack{}
	}
	tr := w.track[srv][cluster]
	if tr == nil {
		tr = &reconcileTrack{}
		w.track[srv][cluster] = tr
	}
	return tr
}

// enter records a Reconcile of srv in cluster beginning; the returned
// func records its end.
func (w *overlapWitness) enter(srv, cluster string) (exit func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.live[cluster] == nil {
		w.live[cluster] = map[string]int{}
	}
	w.live[cluster][srv]++
	n := 0
	for _, k := range w.live[cluster] {
		n += k
	}
	if n > w.max[cluster] {
		w.max[cluster] = n
	}
	if n > 1 && len(w.overlaps[cluster]) < 5 {
		w.overlaps[cluster] = append(w.overlaps[cluster], fmt.Sprintf("%s %v", time.Now().Format(time.StampMicro), w.live[cluster]))
	}
	tr := w.trackLocked(srv, cluster)
	tr.live++
	tr.total++
	if tr.first.IsZero() {
		tr.first = time.Now()
	}
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.live[cluster][srv]--
		tr.live--
		tr.lastExit = time.Now()
	}
}

// get returns a copy of srv's record for cluster.
func (w *overlapWitness) get(srv, cluster string) reconcileTrack {
	w.mu.Lock()
	defer w.mu.Unlock()
	return *w.trackLocked(srv, cluster)
}

// inFlight is how many Reconcile calls of srv run now, in any cluster.
func (w *overlapWitness) inFlight(srv string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, tr := range w.track[srv] {
		n += tr.live
	}
	return n
}

func (w *overlapWitness) maxAtOnce(cluster string) (int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max[cluster], append([]string(nil), w.overlaps[cluster]...)
}

// busyReconciler keeps its cluster busy: each Reconcile of the ConfigMap
// "tick" holds for a while, like real work that does not look at ctx, and
// asks to run again soon after.
type busyReconciler struct {
	w      *overlapWitness
	server string
}

func (r *busyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if req.Name != "tick" {
		return ctrl.Result{}, nil
	}
	cluster, ok := known.ClusterFrom(ctx)
	if !ok {
		return ctrl.Result{}, fmt.Errorf("no cluster in ctx")
	}
	exit := r.w.enter(r.server, cluster)
	time.Sleep(50 * time.Millisecond)
	exit()
	return ctrl.Result{RequeueAfter: 20 * time.Millisecond}, nil
}

// electingServer is a Server started by the test itself: unlike test.Run,
// it lets the test see Start return by itself, and what the Server looked
// like at that moment.
type electingServer struct {
	id     string
	srv    *server.Server
	cancel context.CancelFunc
	done   chan struct{}

	// Set before done closes.
	err      error
	returned time.Time
	statuses []server.ClusterStatus
	inFlight int
}

func startElectingServer(t *testing.T, id, ns, leaseName string, w *overlapWitness) *electingServer {
	t.Helper()
	o := ctrl.Options{
		Logger:                        test.Logger(t).WithValues("server", id),
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		Cache:                         cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		LeaderElection:                true,
		LeaderElectionID:              leaseName,
		LeaderElectionNamespace:       "default",
		LeaderElectionReleaseOnCancel: false,
		LeaseDuration:                 ptr.To(4 * time.Second),
		RenewDeadline:                 ptr.To(3 * time.Second),
		RetryPeriod:                   ptr.To(200 * time.Millisecond),
	}
	srv, err := server.NewServer(fleet.Cluster("host").Config, o)
	if err != nil {
		t.Fatal(err)
	}
	r := &busyReconciler{w: w, server: id}
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("busy-" + ns).For(&corev1.ConfigMap{}).Complete(r)
	})
	for _, name := range members[:2] {
		if err := srv.Add(fleet.Cluster(name).Named); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &electingServer{id: id, srv: srv, cancel: cancel, done: make(chan struct{})}
	go func() {
		err := srv.Start(ctx)
		e.returned = time.Now()
		e.statuses = srv.Statuses()
		e.inFlight = w.inFlight(id)
		e.err = err
		close(e.done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-e.done:
		case <-time.After(time.Minute):
			t.Errorf("server %s: Start did not return within a minute of its ctx ending", id)
		}
	})
	return e
}

// stop cancels Start's ctx and returns Start's error.
func (e *electingServer) stop(t *testing.T) error {
	t.Helper()
	e.cancel()
	select {
	case <-e.done:
		return e.err
	case <-time.After(time.Minute):
		t.Fatalf("server %s: Start did not return within a minute of its ctx ending", e.id)
		return nil
	}
}

func (e *electingServer) leads() bool {
	select {
	case <-e.srv.Elected():
	default:
		return false
	}
	for _, name := range members[:2] {
		if st, err := e.srv.Status(name); err != nil || st.Phase != server.PhaseReady {
			return false
		}
	}
	return true
}

// stealLease makes "thief" the holder of the host's Lease name, renewed
// now for 8 s, as another candidate that won an election would.
func stealLease(t *testing.T, name string) {
	t.Helper()
	c := adminClient(t, "host")
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var l coordinationv1.Lease
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &l); err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity = ptr.To("thief")
		l.Spec.AcquireTime = &now
		l.Spec.RenewTime = &now
		// Longer than the Servers' own 4 s: the old leader gives up at
		// its RenewDeadline (3 s) and stops its members while the thief's
		// claim stands, with seconds to spare on a loaded machine, before
		// the standby may take over.
		l.Spec.LeaseDurationSeconds = ptr.To(int32(8))
		l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
		return c.Update(context.Background(), &l)
	})
	if err != nil {
		t.Fatalf("stealing lease %s: %v", name, err)
	}
}

// A leader that loses its lease without being told to stop (its renewals
// fail: another candidate holds the Lease) has Start return controller-
// runtime's "leader election lost". By then its members must have stopped,
// and the Server that takes over must not run a member before they have:
// at no instant may two Servers reconcile in the same cluster.
func TestLeadershipLossStopsMembersBeforeNewLeaderRuns(t *testing.T) {
	ns := testNamespace(t)
	leaseName := "mccr-steal-" + ns
	for _, name := range members[:2] {
		createConfigMap(t, name, ns, "tick")
	}
	w := newOverlapWitness()
	a := startElectingServer(t, "a", ns, leaseName, w)
	b := startElectingServer(t, "b", ns, leaseName, w)

	test.Eventually(t, 60*time.Second, "one server leads", func() bool { return a.leads() || b.leads() })
	leader, standby := a, b
	if b.leads() {
		leader, standby = b, a
	}
	for _, name := range members[:2] {
		test.Eventually(t, 15*time.Second, "leader reconciles in "+name, func() bool { return w.get(leader.id, name).total >= 3 })
	}
	for _, name := range members[:2] {
		// A standby serves reads: its members run their caches, and only
		// their controllers wait.
		waitReady(t, standby.srv, name)
		if n := w.get(standby.id, name).total; n != 0 {
			t.Fatalf("standby reconciled %d times in %s while the other server led", n, name)
		}
	}

	stolen := time.Now()
	stealLease(t, leaseName)
	t.Logf("lease of %s stolen", leader.id)

	select {
	case <-leader.done:
	case <-standby.done:
		t.Fatalf("the standby's Start returned: %v", standby.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the leader's Start did not return within 30s of losing its lease")
	}
	t.Logf("old leader's Start returned %s after the steal: %v", leader.returned.Sub(stolen).Round(time.Millisecond), leader.err)
	if leader.err == nil || !strings.Contains(leader.err.Error(), "leader election lost") {
		t.Errorf("old leader's Start returned %v, want an error saying leader election was lost", leader.err)
	}
	if leader.inFlight != 0 {
		t.Errorf("%d reconciles of the old leader still ran when its Start returned", leader.inFlight)
	}
	if len(leader.statuses) != 2 {
		t.Errorf("old leader's statuses when Start returned: %+v", leader.statuses)
	}
	for _, st := range leader.statuses {
		if st.Phase != server.PhaseStopped {
			t.Errorf("old leader's %s was %s when Start returned, want Stopped", st.Name, st.Phase)
		}
	}
	totalAtReturn := map[string]int{}
	for _, name := range members[:2] {
		totalAtReturn[name] = w.get(leader.id, name).total
	}

	test.Eventually(t, 30*time.Second, "the standby takes over once the thief's lease expires", standby.leads)
	for _, name := range members[:2] {
		test.Eventually(t, 15*time.Second, "new leader reconciles in "+name, func() bool { return w.get(standby.id, name).total >= 5 })
	}

	for _, name := range members[:2] {
		old, nu := w.get(leader.id, name), w.get(standby.id, name)
		t.Logf("%s: old leader's last reconcile ended %s after the steal, new leader's first began %s after it",
			name, old.lastExit.Sub(stolen).Round(time.Millisecond), nu.first.Sub(stolen).Round(time.Millisecond))
		if !nu.first.After(old.lastExit) {
			t.Errorf("%s: new leader began reconciling (%s) before the old one's last reconcile ended (%s)",
				name, nu.first.Format(time.StampMicro), old.lastExit.Format(time.StampMicro))
		}
		if old.total != totalAtReturn[name] {
			t.Errorf("%s: the old leader reconciled %d more times after its Start returned", name, old.total-totalAtReturn[name])
		}
		if n, overlaps := w.maxAtOnce(name); n != 1 {
			t.Errorf("%s: %d reconciles at once (want 1); reconciles in flight per server: %v", name, n, overlaps)
		}
	}

	if err := standby.stop(t); err != nil {
		t.Errorf("new leader's Start: %v", err)
	}
	for _, st := range standby.srv.Statuses() {
		if st.Phase != server.PhaseStopped {
			t.Errorf("new leader's %s is %s after Start returned", st.Name, st.Phase)
		}
	}
}
