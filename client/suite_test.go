package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// The package's fleet: a host and three members, started once. Tests run
// one after another; each works in its own namespace.
var fleet *test.Fleet

var members = []string{"c1", "c2", "c3"}

func TestMain(m *testing.M) {
	test.Main(m, &fleet, test.Options{}, append([]string{"host"}, members...)...)
}

// serverOptions are the ctrl.Options of every Server of these tests. A nil
// namespace list caches every namespace.
func serverOptions(log logr.Logger, namespaces ...string) ctrl.Options {
	o := ctrl.Options{
		Logger:                 log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	}
	if len(namespaces) > 0 {
		o.Cache.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			o.Cache.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return o
}

// waitReadyErr waits until every named member is Ready.
func waitReadyErr(srv *server.Server, within time.Duration, names ...string) error {
	deadline := time.Now().Add(within)
	for _, n := range names {
		for {
			st, err := srv.Status(n)
			if err == nil && st.Phase == server.PhaseReady {
				break
			}
			if time.Now().After(deadline) {
				if err != nil {
					return fmt.Errorf("cluster %s not Ready within %s: %w", n, within, err)
				}
				return fmt.Errorf("cluster %s not Ready within %s: %+v", n, within, st)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

func waitReady(t testing.TB, srv *server.Server, names ...string) {
	t.Helper()
	if err := waitReadyErr(srv, 90*time.Second, names...); err != nil {
		t.Fatal(err)
	}
}

var shared struct {
	once sync.Once
	srv  *server.Server
	err  error
}

// sharedServer returns the Server most tests use: members c1, c2, c3, all
// Ready, caching every namespace, running the mirror reconciler.
func sharedServer(t testing.TB) *server.Server {
	t.Helper()
	shared.once.Do(func() {
		srv, err := server.NewServer(fleet.Cluster("host").Config, serverOptions(logr.Discard()))
		if err != nil {
			shared.err = err
			return
		}
		r := &mirrorReconciler{Client: srv.GetClient()}
		srv.AddReconcilerSetup(r.SetupWithManager)
		for _, n := range members {
			if err := srv.Add(fleet.Cluster(n).Named); err != nil {
				shared.err = err
				return
			}
		}
		stop := test.Background(srv)
		test.AtExit(stop)
		shared.srv, shared.err = srv, waitReadyErr(srv, 90*time.Second, members...)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.srv
}

// startServer starts a Server of the test's own, caching only ns, with the
// given members added, and stops it when the test ends.
func startServer(t testing.TB, ns string, add ...*config.NamedConfig) *server.Server {
	t.Helper()
	return startServerWith(t, serverOptions(testr.NewWithInterface(t, testr.Options{Verbosity: 0}), ns), add...)
}

// startServerWith is startServer with the given ctrl.Options.
func startServerWith(t testing.TB, o ctrl.Options, add ...*config.NamedConfig) *server.Server {
	t.Helper()
	srv, err := server.NewServer(fleet.Cluster("host").Config, o,
		func(o *server.Options) { o.StopTimeout = 30 * time.Second })
	if err != nil {
		t.Fatal(err)
	}
	for _, nc := range add {
		if err := srv.Add(nc); err != nil {
			t.Fatal(err)
		}
	}
	test.Run(t, srv)
	return srv
}

// named returns a NamedConfig called name that reaches the API server of
// the fleet's cluster. Several names may reach one API server; each gets
// its own Manager and caches.
func named(name, cluster string) *config.NamedConfig {
	return config.NewNamedConfig(name, fleet.Cluster(cluster).Config)
}

// admin returns the test's own uncached client of a cluster: what the
// tests check the fan-out client's work with (test.Cluster.AdminClient).
func admin(t testing.TB, cluster string) crclient.Client {
	t.Helper()
	return fleet.Cluster(cluster).AdminClient(t)
}

// testNamespace creates a namespace named after the test (and unique, for
// -count) in every cluster.
func testNamespace(t testing.TB) string {
	t.Helper()
	ns := test.NamespaceName(t)
	fleet.CreateNamespace(t, ns)
	return ns
}

func configMap(ns, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data}
}

// adminCreate creates obj in cluster with the admin client.
func adminCreate(t testing.TB, cluster string, obj crclient.Object) {
	t.Helper()
	if err := admin(t, cluster).Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %s in %s: %v", obj.GetName(), cluster, err)
	}
}

// adminGet reads a ConfigMap from cluster with the admin client; nil when
// it does not exist.
func adminGet(t testing.TB, cluster, ns, name string) *corev1.ConfigMap {
	t.Helper()
	var cm corev1.ConfigMap
	err := admin(t, cluster).Get(context.Background(), crclient.ObjectKey{Namespace: ns, Name: name}, &cm)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("reading %s/%s in %s: %v", ns, name, cluster, err)
	}
	return &cm
}
