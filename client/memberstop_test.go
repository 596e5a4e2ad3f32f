package client_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	mcclient "github.com/mccr-dev/mccr/client"
	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/test"
)

// requestsSeen closes a channel for each awaited request path (a
// substring of the URL's path) once the member has sent such a request.
type requestsSeen struct {
	next http.RoundTripper
	mu   sync.Mutex
	wait map[string]chan struct{}
}

func (r *requestsSeen) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	for path, ch := range r.wait {
		if strings.Contains(req.URL.Path, path) {
			close(ch)
			delete(r.wait, path)
		}
	}
	r.mu.Unlock()
	return r.next.RoundTrip(req)
}

// TestReadsCutByTheirMemberStoppingAreNotReady: reads waiting on a member
// (a cached Get for a kind whose informer cannot sync, an uncached Get, a
// fleet-wide List) when the member fails return ErrClusterNotReady (or
// ErrClusterNotFound), never the context.Canceled of a stop that is not
// the caller's.
func TestReadsCutByTheirMemberStoppingAreNotReady(t *testing.T) {
	ns := testNamespace(t)
	proxy := test.NewFaultProxy(t, fleet.Cluster("c1").Config)
	cfg := proxy.Config()
	seen := map[string]chan struct{}{
		"/secrets":             make(chan struct{}),
		"/serviceaccounts":     make(chan struct{}),
		"/configmaps/uncached": make(chan struct{}),
	}
	wait := maps.Clone(seen)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &requestsSeen{next: rt, wait: wait} })
	srv := startServer(t, ns, config.NewNamedConfig("p1", cfg))
	waitReady(t, srv, "p1")
	c := srv.GetClient()
	if err := proxy.Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Pass() })

	bg := context.Background()
	reads := map[string]func() error{
		"cached Get": func() error {
			var s corev1.Secret
			return c.Get(in("p1"), crclient.ObjectKey{Namespace: ns, Name: "x"}, &s)
		},
		"uncached Get": func() error {
			var u unstructured.Unstructured
			u.SetAPIVersion("v1")
			u.SetKind("ConfigMap")
			return c.Get(in("p1"), crclient.ObjectKey{Namespace: ns, Name: "uncached"}, &u)
		},
		"fleet-wide List": func() error {
			var l corev1.ServiceAccountList
			return c.List(bg, &l, crclient.InNamespace(ns))
		},
		"fleet-wide List with Partial": func() error {
			var l corev1.ServiceAccountList
			var partial mcclient.Partial
			if err := c.List(known.WithClusters(bg, "p1"), &l, crclient.InNamespace(ns), &partial); err != nil {
				return err
			}
			return partial.Failed["p1"]
		},
	}
	results := map[string]chan error{}
	for name, read := range reads {
		ch := make(chan error, 1)
		results[name] = ch
		go func() { ch <- read() }()
	}
	for p, ch := range seen {
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("no request for %s: the reads do not wait on the member", p)
		}
	}

	srv.AddReconcilerSetup(func(ctrl.Manager) error { return errors.New("late setup fails") })
	for name, ch := range results {
		select {
		case err := <-ch:
			t.Logf("%s: %v", name, err)
			if !errors.Is(err, mcclient.ErrClusterNotReady) && !errors.Is(err, mcclient.ErrClusterNotFound) || errors.Is(err, context.Canceled) {
				t.Errorf("%s cut by its member failing = %v; want ErrClusterNotReady, not context.Canceled", name, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not return within 30s of its member failing", name)
		}
	}
}
