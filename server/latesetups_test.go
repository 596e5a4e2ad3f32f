package server_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// TestSetupsAddedWhileMembersRunApplyOncePerManager: setups registered
// from several goroutines while members run (and while one member
// restarts) reach every member's running Manager, each exactly once, in
// the order they were registered.
func TestSetupsAddedWhileMembersRunApplyOncePerManager(t *testing.T) {
	fakes := startFakes(t, 4)
	members := fakes[1:]
	srv := fakeHostServer(t, fakes)
	var mu sync.Mutex
	applied := map[ctrl.Manager][]int{} // setups applied to each Manager, in order
	setup := func(id int) func(ctrl.Manager) error {
		return func(mgr ctrl.Manager) error {
			mu.Lock()
			defer mu.Unlock()
			applied[mgr] = append(applied[mgr], id)
			return nil
		}
	}
	srv.AddReconcilerSetup(setup(0))
	test.Run(t, srv)
	names := []string{"a", "b", "c"}
	for i, name := range names {
		if err := srv.Add(fakes.variant(name, 1+i%len(members))); err != nil {
			t.Fatal(err)
		}
	}
	waitReady(t, srv, names...)
	ready := func() bool {
		for _, name := range names {
			if st, err := srv.Status(name); err != nil || st.Phase != server.PhaseReady {
				return false
			}
		}
		return true
	}

	const writers, each = 4, 25
	var regMu sync.Mutex
	order := []int{0} // the setups in the order they were registered
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				id := 1 + w*each + i
				regMu.Lock()
				order = append(order, id)
				srv.AddReconcilerSetup(setup(id))
				regMu.Unlock()
				if w == 0 && i == each/2 {
					// A member restarts meanwhile (another API server):
					// its next Manager gets every setup, once.
					if err := srv.Update(fakes.variant("b", 3)); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	const total = 1 + writers*each
	test.Eventually(t, 10*time.Second, "every running member has every setup", func() bool {
		if !ready() {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		complete := 0
		for _, ids := range applied {
			if len(ids) >= total {
				complete++
			}
		}
		return complete >= len(names)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(applied) < len(names)+1 {
		t.Errorf("%d Managers got setups, want at least %d (b restarted)", len(applied), len(names)+1)
	}
	for mgr, ids := range applied {
		// A Manager stopped early has a prefix; each has them once, in
		// registration order.
		if len(ids) > len(order) || !slices.Equal(ids, order[:len(ids)]) {
			t.Errorf("Manager %p got setups %v, want a prefix of %v", mgr, ids, order)
		}
	}
}

// TestSetupRacingAFailingManagerKeepsItsError: a member's Manager fails by
// itself (a runnable returns an error) while a setup registered late is
// being applied, and another is registered meanwhile. The member reports
// the Manager's failure; no setup is applied to the stopped Manager.
func TestSetupRacingAFailingManagerKeepsItsError(t *testing.T) {
	fakes := startFakes(t, 2)
	srv := fakeHostServer(t, fakes, func(o *server.Options) { o.Backoff = wait.Backoff{Duration: time.Hour, Factor: 1} })
	fail := make(chan struct{})
	runCtx := make(chan context.Context, 1)
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			select {
			case runCtx <- ctx:
			default:
			}
			select {
			case <-fail:
				return errors.New("boom")
			case <-ctx.Done():
				return nil
			}
		}))
	})
	test.Run(t, srv)
	if err := srv.Add(fakes.variant("a", 1)); err != nil {
		t.Fatal(err)
	}
	waitReady(t, srv, "a")
	rctx := <-runCtx
	release := make(chan struct{})
	var once sync.Once
	srv.AddReconcilerSetup(func(ctrl.Manager) error {
		once.Do(func() {
			close(fail)   // the Manager fails by itself
			<-rctx.Done() // its shutdown has begun
			<-release     // the next setup is registered meanwhile
			// Give the Manager time to return from Start while this setup
			// still runs (widens the window; the outcome is checked below).
			time.Sleep(200 * time.Millisecond)
		})
		return nil
	})
	var lateAdd atomic.Pointer[error]
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { <-ctx.Done(); return nil }))
		lateAdd.CompareAndSwap(nil, &err)
		return err
	})
	close(release)
	test.Eventually(t, 10*time.Second, "Failed", func() bool {
		st, err := srv.Status("a")
		return err == nil && st.Phase == server.PhaseFailed
	})
	st, err := srv.Status("a")
	if err != nil {
		t.Fatal(err)
	}
	if st.LastError == nil || !strings.Contains(st.LastError.Error(), "boom") {
		t.Errorf("LastError = %v, want the Manager's own failure (boom)", st.LastError)
	}
	if p := lateAdd.Load(); p != nil && *p != nil {
		t.Errorf("a setup ran on the stopped Manager: %v", *p)
	}
}

// fakeHostServer is a Server on fakes[0] (the fakes are closed when the
// test ends, after the Server has stopped), the others for members.
func fakeHostServer(t *testing.T, fakes fakeFleet, opts ...server.Option) *server.Server {
	t.Helper()
	t.Cleanup(fakes.close)
	srv, err := server.NewServer(fakes[0].Config(), ctrl.Options{
		Logger:                 logr.Discard(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}
