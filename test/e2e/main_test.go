package e2e

import (
	"context"
	"fmt"
	"github.com/go-logr/logr"
	"os"
	ctrl "sigs.k8s.io/controller-runtime"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/internal/conntrack"
	"github.com/mccr-dev/mccr/test"
)

// fleet: a host and three members, started once for the package.
var fleet *test.Fleet

var members = []string{"a", "b", "c"}

func TestMain(m *testing.M) {
	// A program sets its logger; without one, controller-runtime's
	// delegating logger keeps every logger it hands out in memory.
	ctrl.SetLogger(logr.Discard())
	var err error
	fleet, err = test.Start(test.Options{}, append([]string{"host"}, members...)...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	closeAdminConnections()
	if err := fleet.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

type admin struct {
	client client.Client
	conns  *conntrack.Tracker
}

var admins = struct {
	sync.Mutex
	m map[string]admin
}{m: map[string]admin{}}

// adminClient is the test's own (uncached) client for a cluster; its
// connections are tracked so a leak check can close them first.
func adminClient(t testing.TB, cluster string) client.Client {
	t.Helper()
	admins.Lock()
	defer admins.Unlock()
	if a, ok := admins.m[cluster]; ok {
		return a.client
	}
	cfg, conns := conntrack.Wrap(fleet.Cluster(cluster).Config)
	cfg.QPS, cfg.Burst = 500, 1000
	cl, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	admins.m[cluster] = admin{cl, conns}
	return cl
}

func closeAdminConnections() {
	admins.Lock()
	defer admins.Unlock()
	for _, a := range admins.m {
		a.conns.Close()
	}
	admins.m = map[string]admin{}
}

// namespace creates a namespace named after the test in every cluster.
func namespace(t testing.TB, name string) string {
	t.Helper()
	for _, c := range fleet.Clusters {
		err := adminClient(t, c.Name).Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	return name
}

// configMaps creates n ConfigMaps cm-0… in ns of cluster (existing ones are
// kept).
func configMaps(t testing.TB, cluster, ns string, n int) {
	t.Helper()
	cl := adminClient(t, cluster)
	for i := 0; i < n; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: ns}}
		if err := cl.Create(context.Background(), cm); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// eventually polls cond every 20ms until it holds or within passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
