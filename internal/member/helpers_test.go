package member

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/mccr-dev/mccr/internal/fakeapi"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	// Reflectors facing a forbidden or hung server complain through klog.
	klog.SetLogger(logr.Discard())
	code := m.Run()
	if err := stopAPIServer(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// newFake starts a fake API server holding objs; it is closed when the
// test ends.
func newFake(t *testing.T, objs ...runtime.Object) *fakeapi.Server {
	t.Helper()
	s := fakeapi.New()
	s.Seed(objs...)
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func configMap(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data:       map[string]string{"k": "v"},
	}
}

func secret(ns, name string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data:       map[string][]byte{"k": []byte("v")},
	}
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// build builds a Manager on s. Unless opts has one, its Lifetime ends when
// the test does (after the Manager stopped, before the leak check), as a
// Server's members' do.
func build(t *testing.T, s *fakeapi.Server, opts BuildOptions) *Manager {
	t.Helper()
	return buildOn(t, s.Config(), opts)
}

// buildOn is build for any API server.
func buildOn(t *testing.T, cfg *rest.Config, opts BuildOptions) *Manager {
	t.Helper()
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.Discard()
	}
	if opts.Lifetime == nil {
		lifetime, end := context.WithCancel(context.Background())
		t.Cleanup(end)
		opts.Lifetime = lifetime
	}
	m, err := Build(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// running is a Manager whose Start runs in a goroutine.
type running struct {
	m      *Manager
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// run starts m. When the test ends, it is stopped (if the test did not),
// every runnable has returned and its idle connections are closed.
func run(t *testing.T, m *Manager) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{m: m, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- m.Start(ctx) }()
	t.Cleanup(func() {
		// A test that cares what Start returned stops it and checks; here
		// it only must have returned.
		_ = r.stop(t)
		waitClosed(t, m.Stopped(), 10*time.Second, "Stopped after the test")
		m.GetHTTPClient().CloseIdleConnections()
	})
	return r
}

// stop cancels Start's context and returns what Start returned.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	return r.wait(t, 10*time.Second)
}

// wait returns what Start returned, failing the test if it has not
// within d.
func (r *running) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	r.once.Do(func() {
		select {
		case r.err = <-r.done:
		case <-time.After(d):
			t.Fatalf("Start did not return within %v", d)
		}
	})
	return r.err
}

func waitClosed(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("not within %v: %s", d, what)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// syncCtx is a context for waiting on a cache sync that should happen.
func syncCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// leaderless is a runnable that needs no leader election.
type leaderless func(context.Context) error

func (f leaderless) Start(ctx context.Context) error { return f(ctx) }
func (leaderless) NeedLeaderElection() bool          { return false }

// stubborn is a runnable that ignores its context: it returns only once
// released.
type stubborn struct {
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

// newStubborn returns a stubborn runnable; tests defer its let, which
// runs before any cleanup (the Manager's stop among them).
func newStubborn() *stubborn {
	return &stubborn{started: make(chan struct{}), release: make(chan struct{})}
}

func (s *stubborn) Start(context.Context) error {
	close(s.started)
	<-s.release
	return nil
}

func (s *stubborn) let() { s.once.Do(func() { close(s.release) }) }
