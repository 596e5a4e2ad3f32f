package sample_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/test"
)

// TestBasic runs sample/basic with both members in one kubeconfig file,
// leader election on, and metrics and probes served.
func TestBasic(t *testing.T) {
	f := sharedFleet(t)
	host := f.Cluster("host")
	const ns = "basic"
	f.CreateNamespace(t, ns)
	members := map[string]client.Client{}
	for _, name := range []string{"m1", "m2"} {
		c := f.Cluster(name).AdminClient(t)
		members[name] = c
		// Present before the sample starts: found by the initial list.
		createConfigMap(t, c, ns, "before", true)
		createConfigMap(t, c, ns, "not-opted-in", false)
	}

	// One file, two contexts.
	kc := clientcmdapi.NewConfig()
	for _, name := range []string{"m1", "m2"} {
		one := test.KubeconfigFor(name, f.Cluster(name).Config)
		kc.Clusters[name], kc.AuthInfos[name], kc.Contexts[name] = one.Clusters[name], one.AuthInfos[name], one.Contexts[name]
	}
	kc.CurrentContext = "m1"
	clusters := filepath.Join(t.TempDir(), "members.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, clusters); err != nil {
		t.Fatal(err)
	}

	metrics, probes := test.FreeAddress(t), test.FreeAddress(t)
	p := start(t, "basic",
		"--kubeconfig", host.KubeconfigPath,
		"--clusters", clusters,
		"--metrics-bind-address", metrics,
		"--health-probe-bind-address", probes,
		"--leader-elect", "--leader-election-namespace", "default",
		"--log-json")

	for name, c := range members {
		waitSeenIn(t, c, ns, "before", name)
		createConfigMap(t, c, ns, "after", true)
	}
	for name, c := range members {
		waitSeenIn(t, c, ns, "after", name)
		// Reconciled in the same namespace before it: had the filter let
		// it through, it would be stamped by now.
		if got, err := seenIn(t.Context(), c, ns, "not-opted-in"); err != nil || got != "" {
			t.Errorf("%s: ConfigMap without the label: stamp %q, err %v; want it untouched", name, got, err)
		}
		// The reconciler read the cluster from ctx; the logger in ctx
		// names the same cluster.
		if !p.logLine("stamped ConfigMap", "cluster", name, "seenIn", name, "namespace", ns) {
			t.Errorf("no %q log line with cluster=seenIn=%s", "stamped ConfigMap", name)
		}
	}

	// The host Manager: probes, metrics, the leader election Lease.
	httpGet(t, "http://"+probes+"/healthz", "ok")
	httpGet(t, "http://"+probes+"/readyz", "ok")
	httpGet(t, "http://"+metrics+"/metrics", `mccr_cluster_ready{cluster="m1"} 1`, `mccr_cluster_ready{cluster="m2"} 1`)
	var lease coordinationv1.Lease
	if err := host.AdminClient(t).Get(t.Context(), types.NamespacedName{Namespace: "default", Name: "basic.sample.mccr.dev"}, &lease); err != nil {
		t.Fatalf("leader election Lease on the host: %v", err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Errorf("leader election Lease has no holder")
	}

	p.terminate()
}

// TestFileWatcher runs sample/filewatcher on a directory that gains a
// member and loses another while it runs.
func TestFileWatcher(t *testing.T) {
	f := sharedFleet(t)
	const ns = "filewatcher"
	f.CreateNamespace(t, ns)
	m1, m2 := f.Cluster("m1").AdminClient(t), f.Cluster("m2").AdminClient(t)
	for _, c := range []client.Client{m1, m2} {
		createConfigMap(t, c, ns, "cm", true)
	}
	dir := t.TempDir()
	dropKubeconfig(t, f.Cluster("m1"), dir)

	p := start(t, "filewatcher",
		"--kubeconfig", f.Cluster("host").KubeconfigPath,
		"--clusters", dir,
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", test.FreeAddress(t),
		"--log-json")
	waitSeenIn(t, m1, ns, "cm", "m1")
	if p.logLine("cluster added", "cluster", "m2") {
		t.Fatal("m2 was added before its kubeconfig was in the directory")
	}
	if got, _ := seenIn(t.Context(), m2, ns, "cm"); got != "" {
		t.Fatalf("m2's ConfigMap stamped %q before m2 joined", got)
	}

	// A kubeconfig dropped in: m2 joins and gets reconciled.
	dropKubeconfig(t, f.Cluster("m2"), dir)
	p.waitLog("cluster added", "cluster", "m2")
	waitSeenIn(t, m2, ns, "cm", "m2")

	// A kubeconfig removed: m1 leaves and its controller stops
	// (controller-runtime's own message, logged with m1's name).
	if err := os.Remove(filepath.Join(dir, "m1.kubeconfig")); err != nil {
		t.Fatal(err)
	}
	p.waitLog("cluster deleted", "cluster", "m1")
	p.waitLog("All workers finished", "cluster", "m1", "controller", "configmap")

	// m2 carries on.
	createConfigMap(t, m2, ns, "after-m1-left", true)
	waitSeenIn(t, m2, ns, "after-m1-left", "m2")

	p.terminate()
}

// TestKubeFed runs sample/kubefed against a host with KubeFed's CRDs, with
// two members joined the way kubefedctl join does it, then unjoins one.
func TestKubeFed(t *testing.T) {
	f := sharedFleet(t)
	host := f.Cluster("host")
	crds, err := test.KubeFedCRDPath()
	if err != nil {
		t.Fatal(err)
	}
	if err := test.InstallCRDs(host.Config, crds); err != nil {
		t.Fatal(err)
	}

	const ns = "kubefed"
	f.CreateNamespace(t, ns)
	members := map[string]client.Client{}
	joined := map[string]*test.KubeFedJoin{}
	for _, name := range []string{"m1", "m2"} {
		joined[name] = join(t, host, f.Cluster(name))
		c := f.Cluster(name).AdminClient(t)
		members[name] = c
		createConfigMap(t, c, ns, "cm", true)
	}

	p := start(t, "kubefed",
		"--kubeconfig", host.KubeconfigPath,
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", test.FreeAddress(t),
		"--log-json")
	for name, c := range members {
		waitSeenIn(t, c, ns, "cm", name)
	}

	// kubefedctl unjoin m2: its Secret goes first, then its KubeFedCluster.
	if err := joined["m2"].Unjoin(t.Context()); err != nil {
		t.Fatal(err)
	}
	p.waitLog("cluster deleted", "cluster", "m2")
	p.waitLog("All workers finished", "cluster", "m2", "controller", "configmap")
	createConfigMap(t, members["m1"], ns, "after-m2-left", true)
	waitSeenIn(t, members["m1"], ns, "after-m2-left", "m1")

	p.terminate()
}

// join does what `kubefedctl join` does, minus KubeFed's own RBAC: a
// cluster-admin service account in the member, and on the host the Secret
// with its token and the KubeFedCluster (test.JoinKubeFed). Everything is
// undone when the test ends.
func join(t *testing.T, host, member *test.Cluster) *test.KubeFedJoin {
	t.Helper()
	ns := configwatcher.DefaultKubeFedNamespace
	sa := member.Name + "-host"
	token, err := test.ServiceAccountToken(t.Context(), member.Config, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	j, err := test.JoinKubeFed(t.Context(), host.Config, ns, member.Name, member.Config, token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// t.Context is cancelled by now.
		ctx := context.Background()
		if err := j.Unjoin(ctx); err != nil {
			t.Error(err)
		}
		if err := test.DeleteServiceAccount(ctx, member.Config, ns, sa); err != nil {
			t.Error(err)
		}
	})
	return j
}

// httpGet waits until url answers 200 with a body holding every one of
// want.
func httpGet(t *testing.T, url string, want ...string) {
	t.Helper()
	eventually(t, fmt.Sprintf("GET %s to answer %q", url, want), func() (bool, error) {
		resp, err := http.Get(url)
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			return false, nil
		}
		for _, w := range want {
			if !strings.Contains(string(body), w) {
				return false, nil
			}
		}
		return true, nil
	})
}
