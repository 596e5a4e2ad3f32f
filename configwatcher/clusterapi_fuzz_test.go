package configwatcher

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/fuzzcheck"
)

// FuzzClusterAPICluster fuzzes a Cluster API Cluster (its name and
// status, in either version, being deleted or not) and the kubeconfig of
// its <cluster>-kubeconfig Secret, with the watcher's options. See
// fuzz_test.go for what is checked.
func FuzzClusterAPICluster(f *testing.F) {
	ready := []byte(`{"initialization":{"controlPlaneInitialized":true},"conditions":[{"type":"Available","status":"True"}]}`)
	f.Add("workload", ready, []byte(tokenKubeconfig("workload-admin@workload", "https://127.0.0.1:6443", fuzzcheck.Token)), uint8(0))
	f.Add("workload", []byte(`{"controlPlaneReady":true}`), []byte(tokenKubeconfig("evil-\xff\xfe", "https://u:"+fuzzcheck.Password+"@h", fuzzcheck.Token)), uint8(1))
	f.Add("workload", []byte(`{"controlPlaneReady":"yes","conditions":"none"}`), []byte("clusters: ["), uint8(2))
	f.Add("workload", ready, []byte(tokenKubeconfig("w", "https://h", fuzzcheck.Token)), uint8(16))
	f.Add("workload", ready, []byte(tokenKubeconfig("w", "https://h", fuzzcheck.Token)), uint8(64|32))
	f.Add("workload", ready, []byte(tokenKubeconfig("w", "https://h", fuzzcheck.Token)), uint8(128|64|32))
	f.Fuzz(func(t *testing.T, name string, status, kubeconfig []byte, mode uint8) {
		var st any
		if json.Unmarshal(status, &st) != nil {
			return // the host stores JSON
		}
		var opts []ClusterAPIOption
		if mode&2 != 0 {
			opts = append(opts, RequireAvailable())
		}
		if mode&4 != 0 {
			opts = append(opts, DeleteOnDeletionStart())
		}
		if mode&8 != 0 {
			opts = append(opts, AllowAuthPlugins())
		}
		o, err := newClusterAPIOptions(opts)
		if err != nil {
			t.Fatal(err)
		}
		version := clusterAPIVersions[int(mode)%len(clusterAPIVersions)]
		cluster := &unstructured.Unstructured{}
		cluster.SetGroupVersionKind(clusterAPIGroupVersion(version).WithKind(clusterAPIKind))
		meta := map[string]any{"namespace": "capi", "name": objectName(name, "workload"), "uid": "uid-1"}
		if mode&16 != 0 {
			meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
		}
		cluster.Object["metadata"] = meta
		cluster.Object["status"] = st
		if _, err := clusterAPITransform(cluster); err != nil {
			t.Fatal(err)
		}
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: "capi", Name: cluster.GetName() + clusterAPIKubeconfigSuffix,
				Labels: map[string]string{ClusterAPIClusterNameLabel: cluster.GetName()},
			},
			Data: map[string][]byte{clusterAPIKubeconfigKey: kubeconfig, "tls.key": []byte(fuzzcheck.KeyBody)},
		}
		secrets := []*corev1.Secret{secret}
		if mode&64 != 0 {
			secrets = nil // not written yet, or deleted first
		}
		w := &ClusterAPIWatcher{hostCache: fuzzHost(clusterAPITransform, secrets...), opts: o, version: version, claimed: newClaimsState()}
		if mode&128 != 0 {
			w.live = fuzzLive{gone: true} // deleted, the cache not told yet
		}
		if mode&32 != 0 {
			w.claimed.owners[o.Name("capi", cluster.GetName())] = "uid-1" // it serves its cluster already
		}
		ref := "capi/" + cluster.GetName()
		l := newLeakCheck(ref, types.NamespacedName{Namespace: "capi", Name: secret.Name}.String())
		l.kubeconfig(kubeconfig)

		c := w.claim(cluster)

		if c == nil {
			return
		}
		if c.ref != ref || c.id != "uid-1" {
			t.Fatalf("claim of %s: ref %q, id %q", ref, c.ref, c.id)
		}
		if mode&(128|64) == 128|64 && c.err != nil && !c.quiet {
			t.Fatalf("a Cluster gone from the host, its Secret with it: %v reported", c.err)
		}
		oc := objectClaim{
			source: "Cluster " + ref, name: c.name, cfg: c.cfg, err: c.err,
			sentinels: []error{ErrSecretInvalid, ErrClusterAPISecretNotFound, ErrClusterAPIClusterInvalid, config.ErrAuthPluginRefused, config.ErrFileReferenceRefused},
			plugins:   o.AllowAuthPlugins,
		}
		oc.check(t, l)
		publishClaims(t, &w.hostCache, c)
		published(t, w.pub, l, oc)
	})
}
