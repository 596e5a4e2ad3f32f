package member

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/internal/fakeapi"
	"github.com/mccr-dev/mccr/internal/leakcheck"
)

// observation is what a runnable sees of the caches when it starts.
type observation struct {
	who                                 string
	cmSynced, secretSynced, otherSynced bool
	listed, indexed                     int
	err                                 error
}

// TestStartOrder checks controller-runtime's start order: the Manager's
// cache and the informers made before Start (GetInformer, IndexField),
// then runnables with a cache of their own, all synced before runnables
// that need no leader election and plain runnables start; and a runnable
// reading the cache in its Start gets no error.
func TestStartOrder(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newFake(t, configMap("a", "x"), configMap("a", "y"), secret("a", "s"), namespace("a"))
	// Every request takes a while, so that a runnable started before the
	// informers synced would see it.
	s.SetLatency(30 * time.Millisecond)
	m := build(t, s, BuildOptions{})
	ctx := context.Background()

	cmInf, err := m.GetCache().GetInformer(ctx, &corev1.ConfigMap{}, cache.BlockUntilSynced(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.GetFieldIndexer().IndexField(ctx, &corev1.Secret{}, "data-key", func(o client.Object) []string {
		data := o.(*corev1.Secret).Data
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		return keys
	}); err != nil {
		t.Fatal(err)
	}
	secretInf, err := m.GetCache().GetInformer(ctx, &corev1.Secret{}, cache.BlockUntilSynced(false))
	if err != nil {
		t.Fatal(err)
	}

	// A runnable with a cache of its own.
	other, err := cluster.New(s.Config(), func(o *cluster.Options) { o.Logger = logr.Discard() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.GetHTTPClient().CloseIdleConnections) // after the Manager stopped
	otherInf, err := other.GetCache().GetInformer(ctx, &corev1.Namespace{}, cache.BlockUntilSynced(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Add(other); err != nil {
		t.Fatal(err)
	}

	seen := make(chan observation, 2)
	observe := func(who string) func(context.Context) error {
		return func(ctx context.Context) error {
			o := observation{who: who, cmSynced: cmInf.HasSynced(), secretSynced: secretInf.HasSynced(), otherSynced: otherInf.HasSynced()}
			var cms corev1.ConfigMapList
			var secrets corev1.SecretList
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			o.err = errors.Join(
				m.GetCache().List(rctx, &cms, client.InNamespace("a")),
				m.GetCache().List(rctx, &secrets, client.MatchingFields{"data-key": "k"}),
			)
			o.listed, o.indexed = len(cms.Items), len(secrets.Items)
			seen <- o
			<-ctx.Done()
			return nil
		}
	}
	if err := m.Add(manager.RunnableFunc(observe("plain runnable"))); err != nil {
		t.Fatal(err)
	}
	if err := m.Add(leaderless(observe("runnable without leader election"))); err != nil {
		t.Fatal(err)
	}

	r := run(t, m)
	for range 2 {
		var o observation
		select {
		case o = <-seen:
		case <-time.After(20 * time.Second):
			t.Fatal("runnables did not start")
		}
		if !o.cmSynced || !o.secretSynced {
			t.Errorf("%s started before the informers made before Start synced (ConfigMaps %v, Secrets %v)", o.who, o.cmSynced, o.secretSynced)
		}
		if !o.otherSynced {
			t.Errorf("%s started before the cache of a runnable cluster synced", o.who)
		}
		if _, ok := errors.AsType[*cache.ErrCacheNotStarted](o.err); ok {
			t.Errorf("%s read the cache in Start: %v", o.who, o.err)
		} else if o.err != nil {
			t.Errorf("%s: %v", o.who, o.err)
		}
		if o.listed != 2 || o.indexed != 1 {
			t.Errorf("%s read %d ConfigMaps and %d indexed Secrets, want 2 and 1", o.who, o.listed, o.indexed)
		}
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Start: %v", err)
	}
}

func TestShutdownTimeoutDefault(t *testing.T) {
	for _, tc := range []struct {
		in      *time.Duration
		d       time.Duration
		forever bool
	}{
		{nil, 30 * time.Second, false},
		{ptr.To(time.Duration(0)), 0, false},
		{ptr.To(200 * time.Millisecond), 200 * time.Millisecond, false},
		{ptr.To(-time.Nanosecond), 0, true},
	} {
		d, forever := ShutdownTimeout(tc.in)
		if d != tc.d || forever != tc.forever {
			name := "nil"
			if tc.in != nil {
				name = tc.in.String()
			}
			t.Errorf("ShutdownTimeout(%s) = %v, %v; want %v, %v", name, d, forever, tc.d, tc.forever)
		}
	}
	if DefaultGracefulShutdownTimeout != 30*time.Second {
		t.Errorf("DefaultGracefulShutdownTimeout = %v, controller-runtime's is 30s", DefaultGracefulShutdownTimeout)
	}
}

// startStubborn starts a Manager with the given shutdown timeout and a
// runnable that ignores its context, and returns once that runnable runs.
func startStubborn(t *testing.T, timeout time.Duration) (*Manager, *running, *stubborn) {
	t.Helper()
	s := newFake(t, configMap("a", "x"))
	m := build(t, s, BuildOptions{Options: Options{GracefulShutdownTimeout: &timeout}})
	st := newStubborn()
	if err := m.Add(st); err != nil {
		t.Fatal(err)
	}
	r := run(t, m)
	waitClosed(t, st.started, 10*time.Second, "stubborn runnable starts")
	return m, r, st
}

func TestGracefulShutdownTimeout(t *testing.T) {
	t.Run("zero does not wait", func(t *testing.T) {
		leakcheck.Cleanup(t)
		m, r, st := startStubborn(t, 0)
		defer st.let()
		r.cancel()
		if err := r.wait(t, 5*time.Second); err != nil {
			t.Errorf("Start = %v, want nil", err)
		}
		if isClosed(m.Stopped()) {
			t.Fatal("Stopped closed while a runnable still runs")
		}
		st.let()
		waitClosed(t, m.Stopped(), 5*time.Second, "Stopped once the runnable returned")
	})

	t.Run("positive bounds the wait", func(t *testing.T) {
		leakcheck.Cleanup(t)
		const timeout = 200 * time.Millisecond
		m, r, st := startStubborn(t, timeout)
		defer st.let()
		begin := time.Now()
		r.cancel()
		err := r.wait(t, 10*time.Second)
		took := time.Since(begin)
		if !errors.Is(err, ErrShutdownTimeout) {
			t.Errorf("Start = %v, want ErrShutdownTimeout", err)
		}
		if took < timeout {
			t.Errorf("Start returned after %v, before the %v timeout", took, timeout)
		}
		if took > timeout+5*time.Second {
			t.Errorf("Start returned after %v, long after the %v timeout", took, timeout)
		}
		if isClosed(m.Stopped()) {
			t.Fatal("Stopped closed while a runnable still runs")
		}
		st.let()
		waitClosed(t, m.Stopped(), 5*time.Second, "Stopped once the runnable returned")
	})

	t.Run("negative waits for the runnables", func(t *testing.T) {
		leakcheck.Cleanup(t)
		m, r, st := startStubborn(t, -1)
		defer st.let()
		r.cancel()
		select {
		case err := <-r.done:
			t.Fatalf("Start returned (%v) while a runnable still runs", err)
		case <-time.After(300 * time.Millisecond):
		}
		if isClosed(m.Stopped()) {
			t.Fatal("Stopped closed while a runnable still runs")
		}
		st.let()
		if err := r.wait(t, 5*time.Second); err != nil {
			t.Errorf("Start = %v, want nil", err)
		}
		waitClosed(t, m.Stopped(), 5*time.Second, "Stopped once the runnable returned")
	})

	t.Run("runnables that return in time", func(t *testing.T) {
		leakcheck.Cleanup(t)
		s := newFake(t)
		m := build(t, s, BuildOptions{Options: Options{GracefulShutdownTimeout: ptr.To(5 * time.Second)}})
		started := make(chan struct{})
		if err := m.Add(manager.RunnableFunc(func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		r := run(t, m)
		waitClosed(t, started, 10*time.Second, "runnable starts")
		if err := r.stop(t); err != nil {
			t.Errorf("Start = %v, want nil", err)
		}
		waitClosed(t, m.Stopped(), 5*time.Second, "Stopped")
	})
}

// callSink is a logr sink that counts messages by their "call" value.
type callSink struct {
	mu    sync.Mutex
	calls map[string]int
	total int
}

func (s *callSink) Init(logr.RuntimeInfo)        {}
func (s *callSink) Enabled(int) bool             { return true }
func (s *callSink) WithName(string) logr.LogSink { return s }
func (s *callSink) WithValues(...any) logr.LogSink {
	return s
}
func (s *callSink) Error(_ error, msg string, kv ...any) { s.Info(0, msg, kv...) }
func (s *callSink) Info(_ int, _ string, kv ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total++
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "call" {
			s.calls[fmt.Sprint(kv[i+1])]++
		}
	}
}

func (s *callSink) count(call string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[call]
}

func TestHostOnlyCalls(t *testing.T) {
	s := newFake(t)
	sink := &callSink{calls: map[string]int{}}
	m := build(t, s, BuildOptions{Options: Options{Logger: logr.New(sink)}})

	for name, err := range map[string]error{
		"AddHealthzCheck":              m.AddHealthzCheck("ping", healthz.Ping),
		"AddReadyzCheck":               m.AddReadyzCheck("ping", healthz.Ping),
		"AddMetricsServerExtraHandler": m.AddMetricsServerExtraHandler("/debug", http.NotFoundHandler()),
	} {
		if !errors.Is(err, ErrHostOnly) {
			t.Errorf("%s = %v, want ErrHostOnly", name, err)
		}
	}

	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for range 5 {
				m.GetWebhookServer().Register("/validate", http.NotFoundHandler())
			}
		})
	}
	wg.Wait()
	if n := sink.count("GetWebhookServer().Register"); n != 1 {
		t.Errorf("GetWebhookServer().Register logged %d times by one Manager, want once", n)
	}
	if n := sink.count("GetWebhookServer"); n != 1 {
		t.Errorf("GetWebhookServer logged %d times by one Manager, want once", n)
	}

	// Once per Manager: another Manager logs it again.
	m2 := build(t, s, BuildOptions{Options: Options{Logger: logr.New(sink)}})
	m2.GetWebhookServer().Register("/validate", http.NotFoundHandler())
	m2.GetWebhookServer().Register("/mutate", http.NotFoundHandler())
	if n := sink.count("GetWebhookServer().Register"); n != 2 {
		t.Errorf("GetWebhookServer().Register logged %d times by two Managers, want twice", n)
	}

	if !isClosed(m.Elected()) {
		t.Error("Elected is not closed: a member elects no leader of its own")
	}
}

func TestAddAfterStartAndStop(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newFake(t, configMap("a", "x"))
	m := build(t, s, BuildOptions{})
	r := run(t, m)
	if !m.WaitForSync(syncCtx(t)) {
		t.Fatal("WaitForSync = false")
	}

	late := make(chan struct{})
	lateCtx := make(chan context.Context, 1)
	if err := m.Add(manager.RunnableFunc(func(ctx context.Context) error {
		lateCtx <- ctx
		close(late)
		<-ctx.Done()
		return nil
	})); err != nil {
		t.Fatalf("Add after Start: %v", err)
	}
	waitClosed(t, late, 5*time.Second, "a runnable added after Start starts at once")
	lateLeaderless := make(chan struct{})
	if err := m.Add(leaderless(func(ctx context.Context) error {
		close(lateLeaderless)
		<-ctx.Done()
		return nil
	})); err != nil {
		t.Fatalf("Add after Start: %v", err)
	}
	waitClosed(t, lateLeaderless, 5*time.Second, "a leaderless runnable added after Start starts at once")

	if err := m.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Errorf("second Start while running = %v, want ErrStarted", err)
	}

	if err := r.stop(t); err != nil {
		t.Errorf("Start = %v", err)
	}
	waitClosed(t, m.Stopped(), 5*time.Second, "Stopped")
	if ctx := <-lateCtx; ctx.Err() == nil {
		t.Error("the late runnable's context did not end with the Manager")
	}

	ran := make(chan struct{}, 1)
	if err := m.Add(manager.RunnableFunc(func(context.Context) error { ran <- struct{}{}; return nil })); !errors.Is(err, ErrStopped) {
		t.Errorf("Add after stop = %v, want ErrStopped", err)
	}
	if err := m.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Errorf("Start after stop = %v, want ErrStarted", err)
	}
	if len(ran) != 0 {
		t.Error("a runnable added after stop ran")
	}
}

func warmupOptions() BuildOptions {
	return BuildOptions{Options: Options{Controller: config.Controller{
		EnableWarmup:       ptr.To(true),
		SkipNameValidation: ptr.To(true),
	}}}
}

func TestControllerReconcilesAndWaitForSync(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newFake(t, configMap("a", "x"))
	s.SetLatency(20 * time.Millisecond)
	m := build(t, s, warmupOptions())
	reqs := make(chan reconcile.Request, 100)
	if err := ctrl.NewControllerManagedBy(m).Named("configmaps").For(&corev1.ConfigMap{}).
		Complete(reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
			select {
			case reqs <- req:
			default:
			}
			return reconcile.Result{}, nil
		})); err != nil {
		t.Fatal(err)
	}
	r := run(t, m)
	if !m.WaitForSync(syncCtx(t)) {
		t.Fatal("WaitForSync = false")
	}
	// The controller has warmed up: its informer has synced.
	inf, err := m.GetCache().GetInformer(context.Background(), &corev1.ConfigMap{}, cache.BlockUntilSynced(false))
	if err != nil {
		t.Fatal(err)
	}
	if !inf.HasSynced() {
		t.Error("WaitForSync returned true before the controller's informer synced")
	}
	want := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "a", Name: "x"}}
	select {
	case req := <-reqs:
		if req != want {
			t.Errorf("reconciled %v, want %v", req, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the seeded ConfigMap was not reconciled")
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Start = %v", err)
	}
}

// TestWaitForSyncEndsWithCtx: WaitForSync returns false once its ctx ends
// if the controller cannot warm up: the server refuses its token, or it
// hangs from the start (so the informer's first discovery
// request, which controller-runtime makes holding its informer map's lock
// and without a ctx, never returns).
func TestWaitForSyncEndsWithCtx(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(*fakeapi.Server)
	}{
		{"unauthorized", func(s *fakeapi.Server) { s.SetUnauthorized(true) }},
		{"hang", func(s *fakeapi.Server) { s.Hang(true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Cleanup(t)
			s := newFake(t, configMap("a", "x"))
			defer s.Close() // before the Manager's cleanup: releases what hangs
			m := build(t, s, warmupOptions())
			if err := ctrl.NewControllerManagedBy(m).Named("configmaps").For(&corev1.ConfigMap{}).
				Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
					return reconcile.Result{}, nil
				})); err != nil {
				t.Fatal(err)
			}
			tc.fault(s)
			n := s.RequestCount()
			r := run(t, m)
			// The controller's warm-up has reached the server.
			deadline := time.Now().Add(10 * time.Second)
			for s.RequestCount() == n {
				if time.Now().After(deadline) {
					t.Fatal("the controller made no request")
				}
				time.Sleep(5 * time.Millisecond)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			synced := make(chan bool, 1)
			go func() { synced <- m.WaitForSync(ctx) }()
			select {
			case ok := <-synced:
				if ok {
					t.Error("WaitForSync = true while the controller cannot sync")
				}
			case <-time.After(5 * time.Second):
				s.Close()
				<-synced
				t.Fatal("WaitForSync did not return within 5s of its 300ms ctx ending")
			}
			// Stopping while requests hang is TestShutdownTimeoutBoundsCacheStop's
			// matter: release them first.
			s.Close()
			if err := r.stop(t); err != nil {
				t.Errorf("Start = %v", err)
			}
		})
	}
}

// TestShutdownTimeoutBoundsCacheStop: the graceful shutdown timeout bounds
// the whole stop, the cache's included, as in controller-runtime (whose
// Manager stops its caches under the same deadline). Here the cache cannot
// stop at once: the first read of a kind holds the informer map's lock
// while it asks a hung server for discovery (without a ctx).
func TestShutdownTimeoutBoundsCacheStop(t *testing.T) {
	for _, tc := range []struct {
		timeout time.Duration
		want    error
	}{
		{0, nil},
		{200 * time.Millisecond, ErrShutdownTimeout},
	} {
		t.Run(tc.timeout.String(), func(t *testing.T) {
			leakcheck.Cleanup(t)
			s := newFake(t, configMap("a", "x"))
			defer s.Close() // before the Manager's cleanup: lets the cache return
			m := build(t, s, BuildOptions{Options: Options{GracefulShutdownTimeout: &tc.timeout}})
			r := run(t, m)
			if !m.WaitForSync(syncCtx(t)) {
				t.Fatal("WaitForSync = false")
			}
			s.Hang(true)
			n := s.RequestCount()
			read := make(chan struct{})
			go func() {
				defer close(read)
				// The read only has to end; what it returns is not the point.
				_ = m.GetCache().Get(context.Background(), keyX, &corev1.ConfigMap{})
			}()
			defer func() { s.Close(); <-read }()
			deadline := time.Now().Add(10 * time.Second)
			for s.RequestCount() == n {
				if time.Now().After(deadline) {
					t.Fatal("the read made no request")
				}
				time.Sleep(5 * time.Millisecond)
			}
			begin := time.Now()
			r.cancel()
			select {
			case err := <-r.done:
				if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
					t.Errorf("Start = %v, want %v", err, tc.want)
				}
				if took := time.Since(begin); took < tc.timeout {
					t.Errorf("Start returned after %v, before the %v timeout", took, tc.timeout)
				}
			case <-time.After(tc.timeout + 5*time.Second):
				t.Fatalf("Start did not return within %v of its ctx ending with a graceful shutdown timeout of %v", tc.timeout+5*time.Second, tc.timeout)
			}
			r.once.Do(func() {}) // Start returned; the cleanup must not wait for it again
		})
	}
}

// gatedSource is an event source that has synced once released.
type gatedSource struct{ release chan struct{} }

func (gatedSource) String() string { return "gated" }
func (gatedSource) Start(context.Context, workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	return nil
}

func (s gatedSource) WaitForSync(ctx context.Context) error {
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestWaitForSyncWaitsForSources: WaitForSync reports a controller synced
// only once its sources have, with or without warm-up (without, they sync
// in the controller's Start).
func TestWaitForSyncWaitsForSources(t *testing.T) {
	for _, warmup := range []bool{true, false} {
		t.Run(fmt.Sprintf("warmup %v", warmup), func(t *testing.T) {
			leakcheck.Cleanup(t)
			s := newFake(t)
			m := build(t, s, BuildOptions{Options: Options{Controller: config.Controller{
				EnableWarmup:       ptr.To(warmup),
				SkipNameValidation: ptr.To(true),
			}}})
			src := gatedSource{release: make(chan struct{})}
			defer func() {
				select {
				case <-src.release:
				default:
					close(src.release)
				}
			}()
			if err := ctrl.NewControllerManagedBy(m).Named("gated").WatchesRawSource(src).
				Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
					return reconcile.Result{}, nil
				})); err != nil {
				t.Fatal(err)
			}
			r := run(t, m)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if m.WaitForSync(ctx) {
				t.Error("WaitForSync = true while the controller's source has not synced")
			}
			close(src.release)
			if !m.WaitForSync(syncCtx(t)) {
				t.Error("WaitForSync = false once the source synced")
			}
			if err := r.stop(t); err != nil {
				t.Errorf("Start = %v", err)
			}
		})
	}
}

// TestInformerKinds: a member's controller sees its objects and their
// changes with the lean informer (the default) and with client-go's
// (ClientGoInformers), and only the latter runs client-go's shared
// processor.
func TestInformerKinds(t *testing.T) {
	for _, clientGo := range []bool{false, true} {
		t.Run(fmt.Sprintf("ClientGoInformers=%v", clientGo), func(t *testing.T) {
			leakcheck.Cleanup(t)
			s := newFake(t, configMap("a", "x"))
			opts := warmupOptions()
			opts.ClientGoInformers = clientGo
			m := build(t, s, opts)
			reconciled := make(chan string, 100) // namespace/name
			if err := ctrl.NewControllerManagedBy(m).Named("configmaps").For(&corev1.ConfigMap{}).
				Complete(reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
					reconciled <- req.String()
					return reconcile.Result{}, nil
				})); err != nil {
				t.Fatal(err)
			}
			r := run(t, m)
			if !m.WaitForSync(syncCtx(t)) {
				t.Fatal("WaitForSync = false")
			}
			awaitName(t, reconciled, "a/x", 10*time.Second, "a/x reconciled")
			if err := m.GetClient().Create(context.Background(), configMap("a", "y")); err != nil {
				t.Fatal(err)
			}
			awaitName(t, reconciled, "a/y", 10*time.Second, "a/y reconciled")
			var dump strings.Builder
			if err := pprof.Lookup("goroutine").WriteTo(&dump, 2); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(dump.String(), "sharedProcessor"); got != clientGo {
				t.Errorf("client-go's shared processor running: %v, want %v", got, clientGo)
			}
			if err := r.stop(t); err != nil {
				t.Errorf("Start = %v", err)
			}
		})
	}
}
