package main

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/sample/syncer/api/v1alpha1"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// The package's fleet: a host and two members, started once. Each test
// works in a namespace of its own, with a Server of its own; a test that
// needs a cluster without the Setting CRD adds one.
var fleet *test.Fleet

func TestMain(m *testing.M) {
	test.Main(m, &fleet, test.Options{}, "host", "m1", "m2")
}

// patience bounds waits for what should happen within a second or two on
// an idle machine; -race on two busy cores is slower.
const patience = 30 * time.Second

var (
	crdsOnce sync.Once
	crdsErr  error
)

// installCRDs installs FleetSetting on the host and Setting in m1 and m2,
// once for the package.
func installCRDs(t *testing.T) {
	t.Helper()
	crdsOnce.Do(func() {
		crdsErr = errors.Join(
			test.InstallCRDs(fleet.Cluster("host").Config, "crd/host"),
			test.InstallCRDs(fleet.Cluster("m1").Config, "crd/member"),
			test.InstallCRDs(fleet.Cluster("m2").Config, "crd/member"))
	})
	if crdsErr != nil {
		t.Fatalf("installing the CRDs: %v", crdsErr)
	}
}

// prepare installs the CRDs and makes the test's namespace in every
// cluster of the fleet.
func prepare(t *testing.T) string {
	t.Helper()
	installCRDs(t)
	ns := test.NamespaceName(t)
	fleet.CreateNamespace(t, ns)
	return ns
}

// newSyncer makes a Server on the fleet's host whose caches see only ns,
// with the syncer set up on it.
func newSyncer(t *testing.T, ns string, o syncerOptions) *server.Server {
	t.Helper()
	srv, err := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{
		Scheme:                 newScheme(),
		Logger:                 test.Logger(t),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		// Every test's Server has the same host controller.
		Controller: crconfig.Controller{SkipNameValidation: ptr.To(true)},
	}, func(o *server.Options) {
		o.Backoff.Duration = 100 * time.Millisecond
		o.Backoff.Cap = time.Second
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := setup(srv, o); err != nil {
		t.Fatal(err)
	}
	return srv
}

// member is the fleet's cluster of this name, with these properties.
func member(name string, props map[string]string) *config.NamedConfig {
	nc := config.NewNamedConfig(name, fleet.Cluster(name).Config)
	nc.Properties = maps.Clone(props)
	return nc
}

// addReady adds members and waits until they are Ready.
func addReady(t *testing.T, srv *server.Server, members ...*config.NamedConfig) {
	t.Helper()
	for _, nc := range members {
		if err := srv.Add(nc); err != nil {
			t.Fatal(err)
		}
	}
	for _, nc := range members {
		test.Eventually(t, 60*time.Second, nc.Name+" Ready", func() bool {
			st, err := srv.Status(nc.Name)
			return err == nil && st.Phase == server.PhaseReady
		})
	}
}

// The test reads and writes the sample's kinds with the clusters' admin
// clients (see test.Cluster.AdminClient), as unstructured objects: their
// scheme is client-go's, and their connections are closed before a leak
// check.

// unstructuredFor is an empty unstructured object of obj's kind.
func unstructuredFor(t *testing.T, obj runtime.Object) unstructured.Unstructured {
	t.Helper()
	gvk, err := apiutil.GVKForObject(obj, newScheme())
	if err != nil {
		t.Fatal(err)
	}
	var u unstructured.Unstructured
	u.SetGroupVersionKind(gvk)
	return u
}

// getIn reads key from cluster into obj; false when it does not exist.
func getIn(t *testing.T, cluster string, key types.NamespacedName, obj client.Object) bool {
	t.Helper()
	u := unstructuredFor(t, obj)
	err := fleet.Cluster(cluster).AdminClient(t).Get(context.Background(), key, &u)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatalf("%s: reading %s: %v", cluster, key, err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		t.Fatal(err)
	}
	return true
}

// createIn creates obj in cluster.
func createIn(t *testing.T, cluster string, obj client.Object) {
	t.Helper()
	u := unstructuredFor(t, obj)
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	gvk := u.GroupVersionKind()
	u.Object = content
	u.SetGroupVersionKind(gvk)
	if err := fleet.Cluster(cluster).AdminClient(t).Create(context.Background(), &u); err != nil {
		t.Fatalf("%s: creating %s: %v", cluster, obj.GetName(), err)
	}
}

// patchIn merge-patches obj (its kind, namespace and name) in cluster
// with p, marshalled to JSON.
func patchIn(t *testing.T, cluster string, obj client.Object, p any) {
	t.Helper()
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	u := unstructuredFor(t, obj)
	u.SetNamespace(obj.GetNamespace())
	u.SetName(obj.GetName())
	if err := fleet.Cluster(cluster).AdminClient(t).Patch(context.Background(), &u, client.RawPatch(types.MergePatchType, raw)); err != nil {
		t.Fatalf("%s: patching %s: %v", cluster, obj.GetName(), err)
	}
}

// deleteIn deletes obj (its kind, namespace and name) from cluster.
func deleteIn(t *testing.T, cluster string, obj client.Object) {
	t.Helper()
	u := unstructuredFor(t, obj)
	u.SetNamespace(obj.GetNamespace())
	u.SetName(obj.GetName())
	if err := fleet.Cluster(cluster).AdminClient(t).Delete(context.Background(), &u); err != nil {
		t.Fatalf("%s: deleting %s: %v", cluster, obj.GetName(), err)
	}
}

// copyIn reads the copy of key in cluster; nil when there is none.
func copyIn(t *testing.T, cluster string, key types.NamespacedName) *v1alpha1.Setting {
	t.Helper()
	var cp v1alpha1.Setting
	if !getIn(t, cluster, key, &cp) {
		return nil
	}
	return &cp
}

// hasCopy reports whether cluster holds a copy of key with this data and
// labels (among others).
func hasCopy(t *testing.T, cluster string, key types.NamespacedName, data, labels map[string]string) bool {
	t.Helper()
	cp := copyIn(t, cluster, key)
	if cp == nil || !maps.Equal(cp.Spec.Data, data) {
		return false
	}
	for k, v := range labels {
		if cp.Labels[k] != v {
			return false
		}
	}
	return true
}

// states returns the host status of key as cluster → state.
func states(t *testing.T, key types.NamespacedName) map[string]v1alpha1.SyncState {
	t.Helper()
	var fs v1alpha1.FleetSetting
	if !getIn(t, "host", key, &fs) {
		return nil
	}
	out := map[string]v1alpha1.SyncState{}
	for _, c := range fs.Status.Clusters {
		out[c.Name] = c.State
	}
	return out
}
