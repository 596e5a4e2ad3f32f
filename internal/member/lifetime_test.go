package member

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/mccr-dev/mccr/internal/fakeapi"
)

// TestNoWatchErrorsAfterLifetime: once a member's lifetime has ended (a
// Server's attempt ends on Delete, Update, disown or a failure), its
// informers' requests are cut and refused until the cache stops (here the
// graceful shutdown takes a while, as with a slow Reconcile), and none of
// that reaches the watch-error handler: a Server's records the cluster's
// last error, and client-go's default logs each at error level.
func TestNoWatchErrorsAfterLifetime(t *testing.T) {
	s := newFake(t, configMap("a", "x"))
	lifetime, endLifetime := context.WithCancel(context.Background())
	defer endLifetime()
	var mu sync.Mutex
	var afterEnd []error
	r, slow := runSlowToStop(t, s, BuildOptions{
		Lifetime: lifetime,
		Cluster: func(co *cluster.Options) {
			co.Cache.DefaultWatchErrorHandler = func(_ context.Context, _ *toolscache.Reflector, err error) {
				if lifetime.Err() == nil {
					return
				}
				mu.Lock()
				afterEnd = append(afterEnd, err)
				mu.Unlock()
			}
		},
	})
	time.Sleep(1200 * time.Millisecond) // past the reflector's 1s "very short watch"
	endLifetime()
	r.cancel()
	time.Sleep(2 * time.Second) // the reflector retries at once, then after 0.8–1.6 s
	mu.Lock()
	errs := append([]error(nil), afterEnd...)
	mu.Unlock()
	for _, err := range errs {
		var ne net.Error
		t.Errorf("watch error reported after the member's lifetime ended: %v (errStoppedBeforeRequest: %v, net.Error: %v)",
			err, errors.Is(err, errStoppedBeforeRequest), errors.As(err, &ne))
	}
	slow.let()
	_ = r.wait(t, 10*time.Second)
}

// runSlowToStop runs a member of s (opts.Lifetime set) whose graceful
// shutdown waits (up to 20s) for a runnable that ignores its ctx, as with a
// slow Reconcile, and returns once its cache has synced and the runnable
// runs. The test lets the runnable go (slow.let) before the Manager's
// cleanup, or at the end.
func runSlowToStop(t *testing.T, s *fakeapi.Server, opts BuildOptions) (*running, *stubborn) {
	t.Helper()
	grace := 20 * time.Second
	opts.GracefulShutdownTimeout = &grace
	m := build(t, s, opts)
	slow := newStubborn()
	if err := m.Add(slow); err != nil {
		t.Fatal(err)
	}
	r := run(t, m)
	t.Cleanup(slow.let) // before the Manager's cleanup waits for it
	if err := m.GetCache().Get(syncCtx(t), keyX, &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	<-slow.started
	return r, slow
}
