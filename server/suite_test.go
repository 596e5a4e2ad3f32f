package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// The package's fleet: a host and four members, started once. Tests run one
// after another and each works in its own namespace.
var fleet *test.Fleet

var members = []string{"m1", "m2", "m3", "m4"}

func TestMain(m *testing.M) {
	test.Main(m, &fleet, test.Options{}, append([]string{"host"}, members...)...)
}

// tally remembers which cluster reconciled which object.
type tally struct {
	mu    sync.Mutex
	calls map[string]map[string]int // cluster → object → count
	bad   []string                  // contexts that did not name their cluster properly
}

func newTally() *tally { return &tally{calls: map[string]map[string]int{}} }

func (r *tally) add(cluster, obj string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls[cluster] == nil {
		r.calls[cluster] = map[string]int{}
	}
	r.calls[cluster][obj]++
}

func (r *tally) count(cluster, obj string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[cluster][obj]
}

func (r *tally) total(cluster string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls[cluster] {
		n += c
	}
	return n
}

// ConfigMapReconciler is an ordinary single-cluster reconciler: it knows
// nothing of mccr but the cluster name it logs. For each ConfigMap "x" it
// creates "x-ack" recording the cluster it ran in.
type ConfigMapReconciler struct {
	client.Client
	rec  *tally
	name string
}

func (r *ConfigMapReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster, ok := known.ClusterFrom(ctx)
	if v, _ := ctx.Value(known.ClusterContext).(string); !ok || v != cluster {
		r.rec.mu.Lock()
		r.rec.bad = append(r.rec.bad, fmt.Sprintf("%q/%v", cluster, ctx.Value(known.ClusterContext)))
		r.rec.mu.Unlock()
	}
	r.rec.add(cluster, req.Name)
	if strings.HasSuffix(req.Name, "-ack") {
		return ctrl.Result{}, nil
	}
	var cm corev1.ConfigMap
	if err := r.Get(ctx, req.NamespacedName, &cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ack := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: req.Name + "-ack", Namespace: req.Namespace},
		Data:       map[string]string{"cluster": cluster},
	}
	if err := r.Create(ctx, ack); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

func (r *ConfigMapReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named(r.name).For(&corev1.ConfigMap{}).Complete(r)
}

// testNamespace creates a namespace named after the test in every cluster.
func testNamespace(t testing.TB) string {
	t.Helper()
	ns := test.NamespaceName(t)
	fleet.CreateNamespace(t, ns)
	return ns
}

// adminClient returns the test's own client for a cluster; see
// test.Cluster.AdminClient.
func adminClient(t testing.TB, cluster string) client.Client {
	t.Helper()
	return fleet.Cluster(cluster).AdminClient(t)
}

type running struct {
	srv  *server.Server
	rec  *tally
	stop func() error
}

// startServer starts a Server on the fleet's host whose caches see only ns,
// with the ConfigMap reconciler registered, and stops it when the test ends.
func startServer(t testing.TB, ns string, mutate func(*ctrl.Options), opts ...server.Option) *running {
	t.Helper()
	o := ctrl.Options{
		Logger:                 test.Logger(t),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
	}
	if mutate != nil {
		mutate(&o)
	}
	srv, err := server.NewServer(fleet.Cluster("host").Config, o, opts...)
	if err != nil {
		t.Fatal(err)
	}
	rec := newTally()
	r := &ConfigMapReconciler{Client: srv.GetClient(), rec: rec, name: "configmaps-" + ns}
	srv.AddReconcilerSetup(r.SetupWithManager)

	stop := test.Run(t, srv)
	return &running{srv: srv, rec: rec, stop: stop}
}

func createConfigMap(t testing.TB, cluster, ns, name string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if err := adminClient(t, cluster).Create(context.Background(), cm); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("%s: %v", cluster, err)
	}
}

// ackIn reports the cluster recorded in name-ack in cluster, or "".
func ackIn(t testing.TB, cluster, ns, name string) string {
	t.Helper()
	var cm corev1.ConfigMap
	err := adminClient(t, cluster).Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name + "-ack"}, &cm)
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data["cluster"]
}

// addReady adds the fleet's clusters of these names and waits until they
// are Ready.
func addReady(t testing.TB, srv *server.Server, names ...string) {
	t.Helper()
	for _, name := range names {
		if err := srv.Add(fleet.Cluster(name).Named); err != nil {
			t.Fatal(err)
		}
	}
	waitReady(t, srv, names...)
}

func waitReady(t testing.TB, srv *server.Server, names ...string) {
	t.Helper()
	for _, n := range names {
		test.Eventually(t, 60*time.Second, n+" Ready", func() bool {
			st, err := srv.Status(n)
			return err == nil && st.Phase == server.PhaseReady
		})
	}
}
