package member

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/internal/leakcheck"
)

type observed struct {
	controller, result string
	took               time.Duration
}

// recorder is an Options.Reconciled that remembers every call.
type recorder struct {
	mu    sync.Mutex
	calls []observed
}

func (r *recorder) report(controller, result string, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, observed{controller, result, took})
}

// take returns the calls so far and forgets them.
func (r *recorder) take() []observed {
	r.mu.Lock()
	defer r.mu.Unlock()
	calls := r.calls
	r.calls = nil
	return calls
}

// outcomes reconciles a request by its name: "error", "requeue",
// "requeue-after", "panic", anything else succeeds; each takes at least a
// millisecond.
func outcomes(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
	time.Sleep(time.Millisecond)
	switch req.Name {
	case "error":
		return reconcile.Result{}, errors.New("failed")
	case "requeue":
		return reconcile.Result{Requeue: true}, nil //nolint:staticcheck // deprecated, still honoured
	case "requeue-after":
		return reconcile.Result{RequeueAfter: time.Minute}, nil
	case "panic":
		panic("reconciler panicked")
	}
	return reconcile.Result{}, nil
}

// TestObserveReconcilesFindsTheReconciler fails if controller-runtime's
// controllers no longer have the shape observe.go relies on (a field Name
// and a field Do holding the reconciler), as an upgrade might bring.
func TestObserveReconcilesFindsTheReconciler(t *testing.T) {
	for _, recoverPanic := range []bool{true, false} {
		c, err := controller.NewUnmanaged("observed", controller.Options{
			Reconciler:         reconcile.Func(outcomes),
			SkipNameValidation: ptr.To(true),
			RecoverPanic:       ptr.To(recoverPanic),
		})
		if err != nil {
			t.Fatal(err)
		}
		rec := &recorder{}
		if !observeReconciles(c, rec.report) {
			t.Fatalf("observeReconciles does not find the reconciler of controller-runtime's %T: has an upgrade renamed its fields Name and Do (see observe.go)?", c)
		}
		if !observeReconciles(c, rec.report) {
			t.Fatal("observeReconciles on a controller it wrapped already = false")
		}
		for _, tc := range []struct{ name, want string }{
			{"ok", ResultSuccess},
			{"error", ResultError},
			{"requeue", ResultRequeue},
			{"requeue-after", ResultRequeueAfter},
			{"panic", ResultError},
		} {
			var panicked any
			var err error
			func() {
				defer func() { panicked = recover() }()
				_, err = c.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: tc.name}})
			}()
			switch {
			case tc.name == "panic" && recoverPanic:
				// controller-runtime recovered it, as without the wrapper.
				if panicked != nil || err == nil || !strings.Contains(err.Error(), "reconciler panicked") {
					t.Errorf("Reconcile that panics with RecoverPanic: panic %v, error %v; want the recovered panic as error", panicked, err)
				}
			case tc.name == "panic":
				if panicked != "reconciler panicked" {
					t.Errorf("Reconcile that panics without RecoverPanic: panic %v, want the reconciler's own", panicked)
				}
			case panicked != nil:
				t.Fatalf("Reconcile(%s) panicked: %v", tc.name, panicked)
			}
			calls := rec.take()
			if len(calls) != 1 {
				t.Fatalf("Reconcile(%s) reported %d times (%v), want once", tc.name, len(calls), calls)
			}
			got := calls[0]
			if got.controller != "observed" || got.result != tc.want || got.took < time.Millisecond {
				t.Errorf("Reconcile(%s) reported %+v, want controller observed, result %s, took ≥ 1ms", tc.name, got, tc.want)
			}
		}
	}
}

// TestObserveReconcilesLeavesOthersAlone: runnables that are not
// controller-runtime controllers for reconcile.Request are not touched.
func TestObserveReconcilesLeavesOthersAlone(t *testing.T) {
	typed, err := controller.NewTypedUnmanaged("typed", controller.TypedOptions[string]{
		Reconciler: reconcile.TypedFunc[string](func(context.Context, string) (reconcile.Result, error) {
			return reconcile.Result{}, nil
		}),
		SkipNameValidation: ptr.To(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	type lookalike struct {
		Name string
		Do   reconcile.Reconciler
	}
	report := func(string, string, time.Duration) { t.Error("reported") }
	for name, r := range map[string]any{
		"controller for another request type": typed,
		"runnable":                            manager.RunnableFunc(func(context.Context) error { return nil }),
		"struct of another package":           &lookalike{Name: "x", Do: reconcile.Func(outcomes)},
		"nil":                                 nil,
	} {
		if observeReconciles(r, report) {
			t.Errorf("observeReconciles(%s) = true", name)
		}
	}
	if _, err := typed.Reconcile(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
}

// TestReconciledHook: controllers added to the Manager, before Start or
// after, report their reconciles.
func TestReconciledHook(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newFake(t, configMap("a", "x"), secret("a", "s"))
	rec := &recorder{}
	opts := warmupOptions()
	opts.Reconciled = rec.report
	m := build(t, s, opts)
	ok := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
	if err := ctrl.NewControllerManagedBy(m).Named("configmaps").For(&corev1.ConfigMap{}).Complete(ok); err != nil {
		t.Fatal(err)
	}
	r := run(t, m)
	if !m.WaitForSync(syncCtx(t)) {
		t.Fatal("WaitForSync = false")
	}
	if err := ctrl.NewControllerManagedBy(m).Named("secrets").For(&corev1.Secret{}).Complete(ok); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	seen := map[string]bool{}
	for {
		for _, c := range rec.take() {
			if c.result != ResultSuccess {
				t.Fatalf("reported %+v, want success", c)
			}
			seen[c.controller] = true
		}
		if seen["configmaps"] && seen["secrets"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reconciles reported by controller: %v; want configmaps and secrets", seen)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Start = %v", err)
	}
}
