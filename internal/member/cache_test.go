package member

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/internal/fakeapi"
	"github.com/mccr-dev/mccr/internal/leakcheck"
)

var keyX = client.ObjectKey{Namespace: "a", Name: "x"}

// TestReadBeforeStartWaits: a read that arrives before the cache started
// waits for it instead of returning ErrCacheNotStarted.
func TestReadBeforeStartWaits(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newFake(t, configMap("a", "x"))
	m := build(t, s, BuildOptions{})

	// A read bounded by its ctx ends with the ctx, not ErrCacheNotStarted.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err := m.GetCache().Get(ctx, keyX, &corev1.ConfigMap{})
	cancel()
	var ns *cache.ErrCacheNotStarted
	if errors.As(err, &ns) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get before Start with a 50ms ctx = %v, want context.DeadlineExceeded", err)
	}

	type result struct {
		cm  *corev1.ConfigMap
		err error
	}
	got, listed, viaClient := make(chan result, 1), make(chan error, 1), make(chan error, 1)
	go func() {
		cm := &corev1.ConfigMap{}
		err := m.GetCache().Get(context.Background(), keyX, cm)
		got <- result{cm, err}
	}()
	go func() { listed <- m.GetCache().List(context.Background(), &corev1.SecretList{}) }()
	go func() { viaClient <- m.GetClient().Get(context.Background(), keyX, &corev1.ConfigMap{}) }()
	r := run(t, m)

	select {
	case res := <-got:
		if res.err != nil {
			t.Errorf("Get issued before Start = %v", res.err)
		} else if res.cm.Data["k"] != "v" {
			t.Errorf("Get issued before Start read %v", res.cm.Data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Get issued before Start did not return after Start")
	}
	for what, ch := range map[string]chan error{"List": listed, "client Get": viaClient} {
		select {
		case err := <-ch:
			if err != nil {
				t.Errorf("%s issued before Start = %v", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s issued before Start did not return after Start", what)
		}
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Start = %v", err)
	}
}

// TestUnsyncableReadEndsWithLifetime: a read of a kind whose informer
// cannot sync returns once the member's lifetime ends, whatever the
// caller's ctx.
func TestUnsyncableReadEndsWithLifetime(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(*fakeapi.Server)
		// warm: the member has read a ConfigMap before the fault, so
		// its REST mapper knows the core group already.
		warm bool
	}{
		{"unauthorized", func(s *fakeapi.Server) { s.SetUnauthorized(true) }, true},
		{"hang after discovery", func(s *fakeapi.Server) { s.Hang(true) }, true},
		// The first read of a kind asks the server for the core group's
		// resources (the REST mapper is lazy), with no ctx.
		{"hang before discovery", func(s *fakeapi.Server) { s.Hang(true) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Cleanup(t)
			s := newFake(t, configMap("a", "x"), secret("a", "s"))
			lifetime, endLifetime := context.WithCancel(context.Background())
			defer endLifetime()
			opts := BuildOptions{Lifetime: lifetime}
			m := build(t, s, opts)
			r := run(t, m)
			if !m.WaitForSync(syncCtx(t)) {
				t.Fatal("WaitForSync = false")
			}
			if tc.warm {
				if err := m.GetCache().Get(syncCtx(t), keyX, &corev1.ConfigMap{}); err != nil {
					t.Fatal(err)
				}
			}
			tc.fault(s)
			n := s.RequestCount()
			done := make(chan error, 1)
			go func() {
				done <- m.GetCache().Get(context.Background(), client.ObjectKey{Namespace: "a", Name: "s"}, &corev1.Secret{})
			}()
			// The read has reached the server, and it cannot answer.
			deadline := time.Now().Add(10 * time.Second)
			for s.RequestCount() == n {
				if time.Now().After(deadline) {
					t.Fatal("the read made no request")
				}
				time.Sleep(5 * time.Millisecond)
			}
			select {
			case err := <-done:
				t.Fatalf("Get of an unsyncable kind returned %v before the lifetime ended", err)
			default:
			}
			endLifetime()
			select {
			case err := <-done:
				if !errors.Is(err, errMemberStopped) {
					t.Errorf("Get = %v, want errMemberStopped", err)
				}
			case <-time.After(5 * time.Second):
				s.Close() // let the test end
				t.Fatal("Get of an unsyncable kind did not return once the member's lifetime ended")
			}
			s.Close() // releases what still hangs; stopping is another test's matter
			if err := r.stop(t); err != nil {
				t.Errorf("Start = %v", err)
			}
		})
	}
}

// TestForbiddenReadFails: a read of a kind the member may not list fails
// with a Forbidden error instead of waiting for as long as the member
// lives; the first read of the kind (the one that makes its informer)
// included.
func TestForbiddenReadFails(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newFake(t, configMap("a", "x"), secret("a", "s"))
	m := build(t, s, BuildOptions{})
	r := run(t, m)
	if !m.WaitForSync(syncCtx(t)) {
		t.Fatal("WaitForSync = false")
	}
	s.Forbid("secrets")
	for i := range 2 {
		done := make(chan error, 1)
		go func() {
			done <- m.GetCache().Get(context.Background(), client.ObjectKey{Namespace: "a", Name: "s"}, &corev1.Secret{})
		}()
		select {
		case err := <-done:
			if !apierrors.IsForbidden(err) {
				t.Errorf("read %d of a forbidden kind = %v, want Forbidden", i+1, err)
			}
		case <-time.After(5 * time.Second):
			s.Close()
			t.Fatalf("read %d of a forbidden kind did not return within 5s", i+1)
		}
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Start = %v", err)
	}
}

// TestSyncedReadAllocs: once its kind has synced, a read costs what it
// costs on the plain informer cache underneath.
func TestSyncedReadAllocs(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newFake(t, configMap("a", "x"))
	m := build(t, s, BuildOptions{})
	r := run(t, m)
	ctx := context.Background()
	cm := &corev1.ConfigMap{}
	if err := m.GetCache().Get(ctx, keyX, cm); err != nil {
		t.Fatal(err)
	}
	wrapped, ok := m.GetCache().(*syncNotifyingCache)
	if !ok {
		t.Fatalf("the member's cache is a %T", m.GetCache())
	}
	plain := wrapped.Cache
	get := func(c cache.Cache) func() {
		return func() {
			if err := c.Get(ctx, keyX, cm); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := fewestAllocs(get(plain))
	if got := fewestAllocs(get(wrapped)); got > want {
		t.Errorf("a synced Get allocates %v times, the plain cache %v", got, want)
	}
	list := &corev1.ConfigMapList{}
	listFrom := func(c cache.Cache) func() {
		return func() {
			if err := c.List(ctx, list); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A read that finds nothing is a read of a synced kind too: reconcilers
	// Get objects that were deleted all the time.
	missing := client.ObjectKey{Namespace: "a", Name: "missing"}
	getMissing := func(c cache.Cache) func() {
		return func() {
			if err := c.Get(ctx, missing, cm); !apierrors.IsNotFound(err) {
				t.Fatalf("Get of a missing ConfigMap = %v", err)
			}
		}
	}
	getMissing(wrapped)()
	want = fewestAllocs(getMissing(plain))
	if got := fewestAllocs(getMissing(wrapped)); got > want {
		t.Errorf("a synced Get that finds nothing allocates %v times, the plain cache %v", got, want)
	}
	listFrom(wrapped)() // marks the list type synced
	want = fewestAllocs(listFrom(plain))
	if got := fewestAllocs(listFrom(wrapped)); got > want {
		t.Errorf("a synced List allocates %v times, the plain cache %v", got, want)
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Start = %v", err)
	}
}

// fewestAllocs is the fewest allocations per call of fn over three rounds
// of testing.AllocsPerRun: it counts the whole process's allocations, and
// the member's own goroutines (informers, the fake API server) allocate
// now and then meanwhile; they can only add to a round's count.
func fewestAllocs(fn func()) float64 {
	return min(testing.AllocsPerRun(200, fn), testing.AllocsPerRun(200, fn), testing.AllocsPerRun(200, fn))
}
