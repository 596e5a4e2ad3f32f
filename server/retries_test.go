package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// TestBackoffResetsAfterReadyEndedByReconnect: Options.Backoff is reset
// once a member was Ready, also when that Ready attempt ended by the
// restart after an outage. Before, a member that failed a few times as it
// joined kept its grown delay, and the first failure after a later outage
// waited for it.
func TestBackoffResetsAfterReadyEndedByReconnect(t *testing.T) {
	ns := testNamespace(t)
	var fail atomic.Bool
	fail.Store(true)
	r := startServer(t, ns, nil, func(o *server.Options) {
		o.Backoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 4, Cap: time.Minute}
		o.ReachProbeInterval = 300 * time.Millisecond
		o.ReachProbeTimeout = 300 * time.Millisecond
		o.OutageProbeInterval = 100 * time.Millisecond
	})
	ok := configMapController("backoff-reset")
	r.srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		if fail.Load() {
			return errors.New("not yet")
		}
		return ok(mgr)
	})
	proxy := test.NewFaultProxy(t, fakeMember(t, "x").Config())
	if err := r.srv.Add(config.NewNamedConfig("flappy", proxy.Config())); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 30*time.Second, "three failed starts", func() bool {
		st, _ := r.srv.Status("flappy")
		return st.Failures >= 3
	})
	fail.Store(false)
	waitPhase(t, r.srv, "flappy", server.PhaseReady)
	fail.Store(true)
	proxy.Refuse()
	waitPhase(t, r.srv, "flappy", server.PhaseUnreachable)
	if err := proxy.Pass(); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, r.srv, "flappy", server.PhaseFailed)
	st, err := r.srv.Status("flappy")
	if err != nil {
		t.Fatal(err)
	}
	if wait := st.NextRetry.Sub(st.Since); wait > 2*time.Second {
		t.Errorf("the member was Ready, yet its next failed start waits %s (want about 500ms)", wait.Round(time.Millisecond))
	}
}

// TestAddAfterStartReturnedIsRefused: a Server does not run again once
// its Start has returned; a cluster added then would never start (and its
// metric series would outlive the Server's). An Update only records the
// config (TestUpdateCountsRestartsAfresh). A second Start, while the
// first runs or once it returned, is ErrAlreadyStarted at once.
func TestAddAfterStartReturnedIsRefused(t *testing.T) {
	ns := testNamespace(t)
	r := startServer(t, ns, nil)
	addReady(t, r.srv, "m1")
	// A Start that ran would run until its ctx ends: bounded, a regression
	// fails here rather than hang.
	second, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := r.srv.Start(second); !errors.Is(err, server.ErrAlreadyStarted) {
		t.Errorf("a second Start while the first runs: %v, want ErrAlreadyStarted", err)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if err := r.srv.Start(second); !errors.Is(err, server.ErrAlreadyStarted) {
		t.Errorf("Start once the first returned: %v, want ErrAlreadyStarted", err)
	}
	if err := r.srv.Add(config.NewNamedConfig("late", fakeMember(t, "x").Config())); !errors.Is(err, server.ErrServerStopped) {
		t.Errorf("Add after Start returned: %v, want ErrServerStopped", err)
	}
	if _, err := r.srv.Status("late"); !errors.Is(err, server.ErrClusterNotFound) {
		t.Errorf("Status of the cluster refused: %v, want ErrClusterNotFound", err)
	}
	if v := metricValue(t, "mccr_cluster_failures_total", "cluster", "late"); v >= 0 {
		t.Error("a series of the cluster refused exists")
	}
}

// queuedWatcher holds its events in a buffered channel, closed by Stop, as
// a watcher that queued its first list does.
type queuedWatcher struct {
	ev   chan configwatcher.Event
	errs chan error
}

func (w *queuedWatcher) Events() <-chan configwatcher.Event { return w.ev }
func (w *queuedWatcher) Errors() <-chan error               { return w.errs }
func (w *queuedWatcher) Stop()                              { close(w.ev); close(w.errs) }

// TestWatchAfterStartReturnedAddsNothing: a watcher given to Watch once
// Start has returned is stopped, and the events it had queued add nothing:
// each is refused with ErrServerStopped, kept in WatchErrors.
func TestWatchAfterStartReturnedAddsNothing(t *testing.T) {
	ns := testNamespace(t)
	r := startServer(t, ns, nil)
	addReady(t, r.srv, "m1")
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	w := &queuedWatcher{ev: make(chan configwatcher.Event, 1), errs: make(chan error)}
	w.ev <- configwatcher.Event{Type: configwatcher.Added, Config: config.NewNamedConfig("late-w", fakeMember(t, "x").Config())}
	r.srv.Watch(w)
	test.Eventually(t, 30*time.Second, "the queued event refused", func() bool {
		for _, we := range r.srv.WatchErrors() {
			if errors.Is(we.Err, server.ErrServerStopped) {
				return true
			}
		}
		return false
	})
	if st, err := r.srv.Status("late-w"); err == nil {
		t.Errorf("a watcher's event applied after Start returned: cluster late-w known, phase %s", st.Phase)
	}
	if v := metricValue(t, "mccr_cluster_failures_total", "cluster", "late-w"); v >= 0 {
		t.Error("a series of the cluster refused exists")
	}
}

// TestSyncTimeoutErrorIsThisAttempts: a member whose caches never sync
// fails each start with "caches not synced", naming the cause recorded
// during that start, if any, never the error of an earlier one: the
// error does not grow with every retry.
func TestSyncTimeoutErrorIsThisAttempts(t *testing.T) {
	ns := testNamespace(t)
	r := startServer(t, ns, nil, func(o *server.Options) {
		o.CacheSyncTimeout = time.Second
		o.Backoff = wait.Backoff{Duration: 300 * time.Millisecond, Factor: 1, Cap: time.Minute}
	})
	f := fakeMember(t, "x")
	ok := configMapController("sync-timeout")
	// After each start's check, the member's API server stops answering:
	// its caches never sync. It answers again once the start has failed,
	// so that the next start's check gets through.
	r.srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		f.Hang(true)
		return ok(mgr)
	})
	if err := r.srv.Add(config.NewNamedConfig("never-synced", f.Config())); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 60*time.Second, "three starts failed on unsynced caches", func() bool {
		st, err := r.srv.Status("never-synced")
		if err == nil && st.Phase == server.PhaseFailed {
			f.Hang(false)
		}
		return err == nil && st.Failures >= 3
	})
	st, err := r.srv.Status("never-synced")
	if err != nil {
		t.Fatal(err)
	}
	if msg := fmt.Sprint(st.LastError); strings.Count(msg, "caches not synced") != 1 {
		t.Errorf("after %d failed starts, LastError is %q; want one start's error", st.Failures, msg)
	}
}
