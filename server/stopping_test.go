package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// stuckReconciler is a ConfigMap controller whose Reconcile ignores its ctx
// and returns only once release closes; entered receives once it runs.
type stuckReconciler struct {
	entered chan struct{}
	release chan struct{}
}

func newStuckReconciler(t *testing.T) *stuckReconciler {
	r := &stuckReconciler{entered: make(chan struct{}, 1), release: make(chan struct{})}
	t.Cleanup(r.free)
	return r
}

func (r *stuckReconciler) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("stuck").For(&corev1.ConfigMap{}).
		Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
			select {
			case r.entered <- struct{}{}:
			default:
			}
			<-r.release
			return reconcile.Result{}, nil
		}))
}

// free lets the reconciler return; once is enough, twice is harmless.
func (r *stuckReconciler) free() {
	select {
	case <-r.release:
	default:
		close(r.release)
	}
}

// running adds a member named name served by a fake API server holding one
// ConfigMap, and waits until r reconciles it.
func (r *stuckReconciler) running(t *testing.T, srv *server.Server, name string) {
	t.Helper()
	if err := srv.Add(config.NewNamedConfig(name, fakeMember(t, "x").Config())); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, srv, name, server.PhaseReady)
	select {
	case <-r.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the reconciler never ran")
	}
}

// TestStartReturnsAfterStopTimeout: a member whose reconciler ignores its
// ctx does not keep Start from returning: as a controller-runtime Manager
// gives up on its runnables after its graceful shutdown timeout, Start
// returns StopTimeout after its ctx ended, with ErrStopTimeout naming the
// member.
func TestStartReturnsAfterStopTimeout(t *testing.T) {
	for _, tc := range []struct {
		name        string
		grace       time.Duration
		stopTimeout time.Duration // 0: the default, grace + 5s
		bound       time.Duration
	}{
		{"grace 0, default StopTimeout", 0, 0, 5 * time.Second},
		// Long enough that the member that is fine stops within it on a
		// loaded machine too.
		{"grace 1s, StopTimeout 6s", time.Second, 6 * time.Second, 6 * time.Second},
		// StopTimeout bounds Start whatever the host Manager's own
		// timeout: a longer one, or none.
		{"grace 20s, StopTimeout 4s", 20 * time.Second, 4 * time.Second, 4 * time.Second},
		{"grace forever, StopTimeout 4s", -1, 4 * time.Second, 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newStuckReconciler(t)
			srv, _ := newFakeServer(t,
				func(o *ctrl.Options) { o.GracefulShutdownTimeout = &tc.grace },
				func(o *server.Options) { o.StopTimeout = tc.stopTimeout },
				r.setup)
			// Start's error is this test's to check (test.Run would
			// report it); the member ends once its reconciler returns.
			stop := test.Background(srv)
			t.Cleanup(func() {
				r.free()
				test.Eventually(t, 30*time.Second, "the stuck member gone", func() bool {
					st, err := srv.Status("stuck")
					return err != nil || st.Phase == server.PhaseStopped
				})
			})
			r.running(t, srv, "stuck")
			if err := srv.Add(config.NewNamedConfig("fine", fakeMember(t).Config())); err != nil {
				t.Fatal(err)
			}
			waitPhase(t, srv, "fine", server.PhaseReady)

			began := time.Now()
			done := make(chan error, 1)
			go func() { done <- stop() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(tc.bound + 10*time.Second):
				st, _ := srv.Status("stuck")
				t.Fatalf("Start has not returned %s after its ctx ended (StopTimeout %s); the member is %s", time.Since(began).Round(time.Millisecond), tc.bound, st.Phase)
			}
			took := time.Since(began)
			if took > tc.bound+3*time.Second {
				t.Errorf("Start returned after %s, StopTimeout %s", took.Round(time.Millisecond), tc.bound)
			}
			if took < tc.bound-time.Second {
				t.Errorf("Start returned after %s, before StopTimeout (%s) with a member still running", took, tc.bound)
			}
			if !errors.Is(err, server.ErrStopTimeout) || !strings.Contains(err.Error(), `"stuck"`) || strings.Contains(err.Error(), `"fine"`) {
				t.Errorf("Start returned %v; want ErrStopTimeout naming the stuck member alone", err)
			}
		})
	}
}

// TestSeriesGoWhenStartGaveUp: a member still stopping when Start returns
// leaves no series behind once it has stopped: Start forgets every
// member's series, and what the member reports as it ends does not bring
// them back.
func TestSeriesGoWhenStartGaveUp(t *testing.T) {
	r := newStuckReconciler(t)
	grace := time.Duration(0)
	srv, _ := newFakeServer(t,
		func(o *ctrl.Options) { o.GracefulShutdownTimeout = &grace },
		func(o *server.Options) { o.StopTimeout = time.Second },
		r.setup)
	stop := test.Background(srv)
	r.running(t, srv, "zombie")
	if v := metricValue(t, "mccr_cluster_restarts_total", "cluster", "zombie"); v == -1 {
		t.Fatal("no series while the member runs")
	}
	if err := stop(); !errors.Is(err, server.ErrStopTimeout) {
		t.Fatalf("Start returned %v; want ErrStopTimeout", err)
	}
	r.free()
	waitPhase(t, srv, "zombie", server.PhaseStopped)
	for _, name := range []string{"mccr_cluster_phase", "mccr_cluster_ready", "mccr_cluster_restarts_total"} {
		if v := metricValue(t, name, "cluster", "zombie"); v != -1 {
			t.Errorf("once Start returned and then the member stopped, %s{cluster=zombie} = %v is served", name, v)
		}
	}
}

// TestMembersStopWithTheServer: while the Server shuts down, members whose
// Managers still stop are Stopping (not Ready), mccr_cluster_ready is 0 for
// them and FleetReadyCheck fails, as while one is deleted.
func TestMembersStopWithTheServer(t *testing.T) {
	r := newStuckReconciler(t)
	grace := 20 * time.Second
	srv, stop := fakeServer(t, func(o *ctrl.Options) { o.GracefulShutdownTimeout = &grace }, r.setup)
	r.running(t, srv, "sd")
	if v := metricValue(t, "mccr_cluster_ready", "cluster", "sd"); v != 1 {
		t.Fatalf("mccr_cluster_ready = %v while Ready", v)
	}
	done := make(chan error, 1)
	go func() { done <- stop() }()
	waitPhase(t, srv, "sd", server.PhaseStopping)
	if v := metricValue(t, "mccr_cluster_ready", "cluster", "sd"); v != 0 {
		t.Errorf("mccr_cluster_ready = %v while the member stops with the Server", v)
	}
	if err := srv.FleetReadyCheck(1)(nil); err == nil {
		t.Error("FleetReadyCheck(1) passes while the only member stops")
	}
	r.free()
	select {
	case err := <-done:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Start did not return once the reconciler did")
	}
}

// TestUpdateCountsRestartsAfresh: an Update that replaces the member starts
// counting its restarts afresh (ClusterStatus.Restarts), and forgets when
// the old config was to be retried; so does an Update of a member that
// runs nowhere at the time (the Server stopped here).
func TestUpdateCountsRestartsAfresh(t *testing.T) {
	for _, stopped := range []bool{false, true} {
		t.Run(fmt.Sprintf("stopped=%v", stopped), func(t *testing.T) {
			srv, stop := fakeServer(t, nil, configMapController("cms"))
			if err := srv.Add(unreachable(t, "rv")); err != nil {
				t.Fatal(err)
			}
			test.Eventually(t, 30*time.Second, "rv restarted twice", func() bool {
				st, err := srv.Status("rv")
				return err == nil && st.Restarts >= 2
			})
			if stopped {
				if err := stop(); err != nil {
					t.Fatal(err)
				}
			}
			if err := srv.Update(config.NewNamedConfig("rv", fakeMember(t).Config())); err != nil {
				t.Fatal(err)
			}
			if !stopped {
				waitPhase(t, srv, "rv", server.PhaseReady)
			}
			st, err := srv.Status("rv")
			if err != nil {
				t.Fatal(err)
			}
			if st.Restarts != 0 || !st.NextRetry.IsZero() {
				t.Errorf("after an Update that replaced the member: Restarts = %d, NextRetry = %s; want 0 and none", st.Restarts, st.NextRetry)
			}
		})
	}
}

// TestGetManagerRefusesAStoppingMember: once a member is asked to stop (an
// Update replaces it, a Delete removes it), GetManager no longer hands out
// its Manager, as the fan-out client no longer routes to it.
func TestGetManagerRefusesAStoppingMember(t *testing.T) {
	for _, how := range []string{"update", "delete"} {
		t.Run(how, func(t *testing.T) {
			r := newStuckReconciler(t)
			grace := 20 * time.Second
			srv, _ := fakeServer(t, func(o *ctrl.Options) { o.GracefulShutdownTimeout = &grace }, r.setup)
			r.running(t, srv, "gm")
			if _, err := srv.GetManager("gm"); err != nil {
				t.Fatalf("GetManager of a Ready member: %v", err)
			}
			changed := make(chan error, 1)
			go func() {
				if how == "delete" {
					changed <- srv.Delete("gm")
					return
				}
				changed <- srv.Update(config.NewNamedConfig("gm", fakeMember(t).Config()))
			}()
			test.Eventually(t, 30*time.Second, "gm stopping", func() bool {
				st, err := srv.Status("gm")
				return err != nil || st.Phase == server.PhaseStopping
			})
			want := server.ErrClusterNotReady
			if how == "delete" {
				want = server.ErrClusterNotFound
			}
			if mgr, err := srv.GetManager("gm"); !errors.Is(err, want) {
				t.Errorf("GetManager of a stopping member: %T, %v; want %v", mgr, err, want)
			}
			r.free()
			if err := <-changed; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTwoServersKeepTheirSeries: two Servers of one process share the
// series of a member name both have; one deleting its member, or stopping,
// leaves them to the other, and they go once neither has the name.
func TestTwoServersKeepTheirSeries(t *testing.T) {
	a, stopA := fakeServer(t, nil, configMapController("cms-a"))
	b, _ := fakeServer(t, nil, configMapController("cms-b"))
	for _, srv := range []*server.Server{a, b} {
		if err := srv.Add(config.NewNamedConfig("dup", fakeMember(t).Config())); err != nil {
			t.Fatal(err)
		}
		waitPhase(t, srv, "dup", server.PhaseReady)
	}
	if err := a.Delete("dup"); err != nil {
		t.Fatal(err)
	}
	if v := metricValue(t, "mccr_cluster_restarts_total", "cluster", "dup"); v == -1 {
		t.Error("after one Server deleted its member dup, the other's has no series")
	}
	if err := a.Add(config.NewNamedConfig("dup", fakeMember(t).Config())); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, a, "dup", server.PhaseReady)
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	if v := metricValue(t, "mccr_cluster_restarts_total", "cluster", "dup"); v == -1 {
		t.Error("after one Server stopped, the other's member dup has no series")
	}
	if err := b.Delete("dup"); err != nil {
		t.Fatal(err)
	}
	if v := metricValue(t, "mccr_cluster_restarts_total", "cluster", "dup"); v != -1 {
		t.Errorf("once neither Server has dup, mccr_cluster_restarts_total{cluster=dup} = %v; want no series", v)
	}
}

// TestReAddWhileStoppingStartsAfresh: a member deleted while its Manager
// takes its time to stop (a reconciler that ignores its ctx, past
// StopTimeout) has no series left once Delete returned, and the name added
// again meanwhile, another member, starts from nothing: no failures,
// restarts, last error or time to ready of the deleted one, in Status or
// in its series, before or after the old Manager has stopped.
func TestReAddWhileStoppingStartsAfresh(t *testing.T) {
	r := newStuckReconciler(t)
	var failing atomic.Bool
	failing.Store(true)
	srv, _ := fakeServerWith(t, nil,
		func(o *server.Options) { o.StopTimeout = time.Second },
		func(mgr ctrl.Manager) error {
			if failing.Load() {
				return errors.New("not yet")
			}
			return r.setup(mgr)
		})
	if err := srv.Add(config.NewNamedConfig("again", fakeMember(t, "x").Config())); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 30*time.Second, "again failed twice", func() bool {
		st, err := srv.Status("again")
		return err == nil && st.Failures >= 2
	})
	failing.Store(false)
	waitPhase(t, srv, "again", server.PhaseReady)
	select {
	case <-r.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the reconciler never ran")
	}
	if v := metricValue(t, "mccr_cluster_failures_total", "cluster", "again"); v < 2 {
		t.Fatalf("mccr_cluster_failures_total{cluster=again} = %v before the Delete; want at least 2", v)
	}

	if err := srv.Delete("again"); !errors.Is(err, server.ErrStopTimeout) {
		t.Fatalf("Delete of a member whose reconciler ignores its ctx: %v; want ErrStopTimeout", err)
	}
	if n := seriesOf(t, "again"); n != 0 {
		t.Errorf("%d series of the deleted member remain while its Manager still stops", n)
	}

	fresh := func(when string) {
		t.Helper()
		st, err := srv.Status("again")
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if st.Failures != 0 || st.Restarts != 0 || st.LastError != nil || st.TimeToReady != 0 && st.Phase != server.PhaseReady {
			t.Errorf("%s: Failures %d, Restarts %d, LastError %v, TimeToReady %s (%s); want the new member's own, none of the deleted one's",
				when, st.Failures, st.Restarts, st.LastError, st.TimeToReady, st.Phase)
		}
		for _, name := range []string{"mccr_cluster_failures_total", "mccr_cluster_setup_errors_total", "mccr_cluster_restarts_total"} {
			if v := metricValue(t, name, "cluster", "again"); v > 0 {
				t.Errorf("%s: %s{cluster=again} = %v; want the new member's own count, 0", when, name, v)
			}
		}
	}
	if err := srv.Add(config.NewNamedConfig("again", fakeMember(t).Config())); err != nil {
		t.Fatal(err)
	}
	fresh("added again while the deleted member's Manager stops")
	r.free()
	waitPhase(t, srv, "again", server.PhaseReady)
	fresh("Ready again")
	if err := srv.Delete("again"); err != nil {
		t.Fatal(err)
	}
	if n := seriesOf(t, "again"); n != 0 {
		t.Errorf("%d series remain after the second Delete", n)
	}
}
