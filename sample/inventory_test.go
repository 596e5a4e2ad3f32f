package sample_test

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	clusterapicrd "github.com/mccr-dev/mccr/apis/clusterapi/crd"
	clusterinventorycrd "github.com/mccr-dev/mccr/apis/clusterinventory/crd"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/test"
)

// TestInventory runs sample/inventory with each --source against a host
// holding that inventory, one member listed in it, and checks the member's
// ConfigMaps are reconciled under the name the source gives it.
func TestInventory(t *testing.T) {
	f := sharedFleet(t)
	host, member := f.Cluster("host"), f.Cluster("m1")
	hc := host.AdminClient(t)
	mc := member.AdminClient(t)
	kubeconfig, err := clientcmd.Write(test.KubeconfigFor("m1", member.Config))
	if err != nil {
		t.Fatal(err)
	}

	// run starts the sample with a source whose objects are in ns on the
	// host, and waits for a ConfigMap of the member to be stamped with the
	// cluster name the source gives.
	run := func(t *testing.T, ns, cluster string, args ...string) {
		t.Helper()
		f.CreateNamespace(t, ns) // on the host and on the member
		createConfigMap(t, mc, ns, "listed", true)
		p := start(t, "inventory", append([]string{
			"--kubeconfig", host.KubeconfigPath,
			"--metrics-bind-address", "0",
			"--health-probe-bind-address", test.FreeAddress(t),
			"--namespace", ns,
			"--log-json"}, args...)...)
		waitSeenIn(t, mc, ns, "listed", cluster)
		p.terminate()
	}

	t.Run("Secrets", func(t *testing.T) {
		const ns = "inv-secrets"
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "east",
				Labels: map[string]string{configwatcher.DefaultSecretLabel: configwatcher.DefaultSecretLabelValue}},
			Data: map[string][]byte{configwatcher.DefaultSecretKey: kubeconfig},
		}
		f.CreateNamespace(t, ns)
		if err := hc.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		run(t, ns, "east", "--source", "secrets")
	})

	t.Run("ArgoCD", func(t *testing.T) {
		const ns = "inv-argocd"
		cfg, err := json.Marshal(map[string]any{"tlsClientConfig": map[string]any{
			"caData":   base64.StdEncoding.EncodeToString(member.Config.CAData),
			"certData": base64.StdEncoding.EncodeToString(member.Config.CertData),
			"keyData":  base64.StdEncoding.EncodeToString(member.Config.KeyData),
		}})
		if err != nil {
			t.Fatal(err)
		}
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster-west",
				Labels: map[string]string{configwatcher.ArgoCDSecretLabel: configwatcher.ArgoCDSecretLabelValue}},
			Data: map[string][]byte{"name": []byte("west"), "server": []byte(member.Config.Host), "config": cfg},
		}
		f.CreateNamespace(t, ns)
		if err := hc.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		run(t, ns, "west", "--source", "argocd")
	})

	t.Run("ClusterAPI", func(t *testing.T) {
		const ns = "inv-capi"
		installCRD(t, host, clusterapicrd.Cluster)
		f.CreateNamespace(t, ns)
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "workload-kubeconfig",
				Labels: map[string]string{configwatcher.ClusterAPIClusterNameLabel: "workload"}},
			Type: "cluster.x-k8s.io/secret",
			Data: map[string][]byte{"value": kubeconfig},
		}
		if err := hc.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		c := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
			"metadata": map[string]any{"namespace": ns, "name": "workload"},
			"spec":     map[string]any{},
		}}
		if err := hc.Create(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		// Cluster API's controllers set this once the control plane is up.
		c.Object["status"] = map[string]any{"initialization": map[string]any{"controlPlaneInitialized": true}}
		if err := hc.Status().Update(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		run(t, ns, ns+"/workload", "--source", "cluster-api")
	})

	t.Run("ClusterProfiles", func(t *testing.T) {
		const ns = "inv-cp"
		installCRD(t, host, clusterinventorycrd.ClusterProfile)
		f.CreateNamespace(t, ns)
		dir := t.TempDir()
		token, err := test.ServiceAccountToken(t.Context(), member.Config, "mccr-system", "inventory-sample")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "m1.token"), []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
		providers, err := json.Marshal(map[string]any{"providers": []any{map[string]any{
			"name": "token-file",
			"execConfig": map[string]any{
				"apiVersion":         "client.authentication.k8s.io/v1",
				"command":            buildPlugin(t),
				"args":               []string{"--dir", dir},
				"provideClusterInfo": true,
			},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		providersFile := filepath.Join(dir, "providers.json")
		if err := os.WriteFile(providersFile, providers, 0o600); err != nil {
			t.Fatal(err)
		}
		p := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
			"metadata": map[string]any{"namespace": ns, "name": "m1"},
			"spec":     map[string]any{"displayName": "m1", "clusterManager": map[string]any{"name": "sample"}},
		}}
		if err := hc.Create(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		// The cluster manager reports the profile healthy, and how to reach it.
		p.Object["status"] = map[string]any{
			"conditions": []any{map[string]any{
				"type": configwatcher.ClusterProfileHealthyCondition, "status": "True",
				"reason": "Healthy", "message": "", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
			}},
			"accessProviders": []any{map[string]any{"name": "token-file", "cluster": map[string]any{
				"server":                     member.Config.Host,
				"certificate-authority-data": base64.StdEncoding.EncodeToString(member.Config.CAData),
				"extensions": []any{map[string]any{
					"name": configwatcher.ClusterExecExtension, "extension": map[string]any{"clusterName": "m1"},
				}},
			}}},
		}
		if err := hc.Status().Update(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		run(t, ns, ns+"/m1", "--source", "cluster-profiles", "--access-providers-file", providersFile)
	})
}

// installCRD installs one of the CRDs mccr ships for its watchers' tests.
func installCRD(t *testing.T, c *test.Cluster, get func() (*apiextensionsv1.CustomResourceDefinition, error)) {
	t.Helper()
	crd, err := get()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(c.Config, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{crd}}); err != nil {
		t.Fatal(err)
	}
}

// buildPlugin builds the exec credential plugin of the ClusterProfile
// watcher's tests: it hands out the token in <dir>/<cluster>.token.
func buildPlugin(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "execplugin")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", out, "../configwatcher/testdata/execplugin")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the exec plugin: %v\n%s", err, msg)
	}
	return out
}
