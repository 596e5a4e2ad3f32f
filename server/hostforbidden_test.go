package server

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mccr-dev/mccr/internal/syncinformer"
	"github.com/mccr-dev/mccr/test"
)

// refusingListWatch lists and watches Secrets, refusing (403) until
// granted, and counting what it was asked.
type refusingListWatch struct {
	granted atomic.Bool
	refused atomic.Int64
}

func (lw *refusingListWatch) forbidden() error {
	lw.refused.Add(1)
	return apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "", nil)
}

func (lw *refusingListWatch) ListWithContext(context.Context, metav1.ListOptions) (runtime.Object, error) {
	if !lw.granted.Load() {
		return nil, lw.forbidden()
	}
	return &corev1.SecretList{ListMeta: metav1.ListMeta{ResourceVersion: "7"}}, nil
}

func (lw *refusingListWatch) WatchWithContext(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if !lw.granted.Load() {
		return nil, lw.forbidden()
	}
	w := watch.NewRaceFreeFake()
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		// A watch-list: no objects, then the bookmark that ends them.
		w.Action(watch.Bookmark, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
			ResourceVersion: "7", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"},
		}})
	}
	return w, nil
}

// A host kind the host's identity may not list is in the forbidden set
// from its first 403, and leaves it once its reflector lists again (the
// rule granted), with no member watching it to notice; the user's own
// watch error handler is still called with every error.
func TestHostForbiddenKindLeavesWhenListedAgain(t *testing.T) {
	forbidden := syncinformer.NewKinds()
	var userCalls atomic.Int64
	opts := ctrl.Options{Logger: test.Logger(t)}
	opts.Cache.DefaultWatchErrorHandler = func(context.Context, *toolscache.Reflector, error) { userCalls.Add(1) }
	opts = recordHostForbidden(opts, forbidden)

	lw := &refusingListWatch{}
	inf := toolscache.NewSharedIndexInformer(&toolscache.ListWatch{ListWithContextFunc: lw.ListWithContext, WatchFuncWithContext: lw.WatchWithContext}, &corev1.Secret{}, 0, toolscache.Indexers{})
	if err := inf.SetWatchErrorHandlerWithContext(opts.Cache.DefaultWatchErrorHandler); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	const kind = "*v1.Secret"
	test.Eventually(t, 10*time.Second, "the refused kind forbidden", func() bool { return forbidden.Has(kind) })
	if userCalls.Load() == 0 {
		t.Error("the user's watch error handler was not called")
	}
	lw.granted.Store(true)
	test.Eventually(t, 30*time.Second, "the kind allowed once listed again", func() bool { return !forbidden.Has(kind) })
}
