package server_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/test"
)

type baseContextKey struct{}

// TestMembersGetBaseContext: a member's Reconcile ctx carries what
// ctrl.Options.BaseContext puts there, as a plain Manager's runnables get
// it, besides the member's name.
func TestMembersGetBaseContext(t *testing.T) {
	var got atomic.Pointer[string]
	srv, _ := fakeServer(t, func(o *ctrl.Options) {
		o.BaseContext = func() context.Context {
			return context.WithValue(context.Background(), baseContextKey{}, "from BaseContext")
		}
	}, func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("basectx").For(&corev1.ConfigMap{}).
			Complete(reconcile.Func(func(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
				v, _ := ctx.Value(baseContextKey{}).(string)
				name, _ := known.ClusterFrom(ctx)
				s := v + " in " + name
				got.Store(&s)
				return reconcile.Result{}, nil
			}))
	})
	if err := srv.Add(config.NewNamedConfig("m", fakeMember(t, "x").Config())); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 30*time.Second, "a reconcile", func() bool { return got.Load() != nil })
	if s := *got.Load(); s != "from BaseContext in m" {
		t.Errorf("a member's Reconcile ctx carries %q; want BaseContext's value and the member's name", s)
	}
}
