package e2e

import (
	"context"
	"fmt"
	"github.com/go-logr/logr"
	"os"
	ctrl "sigs.k8s.io/controller-runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	if err := fleet.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
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
	for i := 0; i < n; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: ns}}
		if err := cl.Create(context.Background(), cm); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}
