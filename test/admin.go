package test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/internal/conntrack"
)

// adminClient is a Cluster's AdminClient and the tracker of its
// connections.
type adminClient struct {
	mu     sync.Mutex
	client client.Client
	conns  *conntrack.Tracker
}

// AdminClient returns the test's own client of the cluster: uncached, so it
// reads what the API server holds right now rather than what some informer
// has seen, as an administrator, with client-go's default scheme. Tests set
// up objects and check a controller's work with it.
//
// Every call returns the same client until Fleet.CloseConnections, which
// closes its connections; the next call then makes a new one. Its
// connections are its own, not shared through client-go's process-wide
// transport cache, so a test can close them before it checks that the code
// under test left no connection or goroutine behind. For another scheme,
// use Client.
func (c *Cluster) AdminClient(tb testing.TB) client.Client {
	tb.Helper()
	a := &c.admin
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.client == nil {
		cfg, conns := conntrack.Wrap(c.Config)
		cl, err := client.New(cfg, client.Options{})
		if err != nil {
			conns.Close()
			tb.Fatalf("test: admin client for cluster %s: %v", c.Name, err)
		}
		a.client, a.conns = cl, conns
	}
	return a.client
}

// CloseConnections closes every connection of the clusters' admin clients,
// so that a leak check afterwards sees only what the code under test left
// behind. A client AdminClient returned before is unusable afterwards; the
// next AdminClient call makes a new one.
func (f *Fleet) CloseConnections() {
	for _, c := range f.snapshot() {
		if c != nil {
			c.admin.close()
		}
	}
}

func (a *adminClient) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conns != nil {
		a.conns.Close()
	}
	a.client, a.conns = nil, nil
}

// CreateNamespace creates the namespace name in every cluster of the fleet,
// with the admin clients, unless it exists already. Tests that share a fleet
// keep out of each other's way by working in namespaces of their own, and a
// controller under test usually caches one namespace in every member.
func (f *Fleet) CreateNamespace(tb testing.TB, name string) {
	tb.Helper()
	for _, c := range f.snapshot() {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := c.AdminClient(tb).Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
			tb.Fatalf("test: creating namespace %s in cluster %s: %v", name, c.Name, err)
		}
	}
}

var namespaceSeq atomic.Int64

// NamespaceName returns a namespace name for the test: its name made a
// valid DNS label, so that what a test leaves behind is easy to trace back
// to it, with a number that makes it unique in the process, so that runs
// with -count or a benchmark's repeated runs start from an empty namespace.
func NamespaceName(tb testing.TB) string {
	ns := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(tb.Name()))
	ns = strings.Trim(ns[:min(len(ns), 50)], "-")
	if ns == "" {
		ns = "test"
	}
	return fmt.Sprintf("%s-%d", ns, namespaceSeq.Add(1))
}
