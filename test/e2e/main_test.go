package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/test"
)

// fleet: a host and three members, started once for the package.
var fleet *test.Fleet

var members = []string{"a", "b", "c"}

func TestMain(m *testing.M) {
	if isScaleChild() || isFleetEngineChild() {
		// A scale run's child reaches the fleet of the process that
		// started it (scalechild_test.go); a fake fleet's engine needs
		// none (fleet10k_bench_test.go).
		ctrl.SetLogger(logr.Discard())
		os.Exit(m.Run())
	}
	// Main also sets a discarding logger: without one, controller-runtime's
	// delegating logger keeps every logger it hands out in memory.
	test.Main(m, &fleet, test.Options{}, append([]string{"host"}, members...)...)
}

// adminClient is the test's own (uncached) client for a cluster; see
// test.Cluster.AdminClient.
func adminClient(t testing.TB, cluster string) client.Client {
	t.Helper()
	return fleet.Cluster(cluster).AdminClient(t)
}

// namespace creates the namespace name in every cluster.
func namespace(t testing.TB, name string) string {
	t.Helper()
	fleet.CreateNamespace(t, name)
	return name
}

// configMaps creates n ConfigMaps cm-0… in ns of cluster (existing ones are
// kept).
func configMaps(t testing.TB, cluster, ns string, n int) {
	t.Helper()
	cl := adminClient(t, cluster)
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: ns}}
		if err := cl.Create(context.Background(), cm); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}
