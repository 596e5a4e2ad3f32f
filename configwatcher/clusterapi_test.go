package configwatcher_test

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	capicrd "github.com/mccr-dev/mccr/apis/clusterapi/crd"
	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/test"
)

// TestClusterAPIWatcher runs every test of the ClusterAPIWatcher under one
// fleet: two API servers, started once. The host serves the Cluster CRD in
// both versions; the member, the workload cluster every kubeconfig Secret
// reaches, also stands in for a management cluster that has no Cluster API
// yet, then serves v1beta1 only.
func TestClusterAPIWatcher(t *testing.T) {
	// Registered first, so it runs last: after the fleet has stopped.
	t.Cleanup(func() { leakcheck.VerifyNone(t) })
	env := &clusterAPIEnv{secretEnv: newSecretEnv(t, "capi-host", "capi-member")}
	installCRD(t, env.host.Config, capicrd.Cluster)
	var err error
	if env.memberClient, err = client.New(env.member.Config, client.Options{}); err != nil {
		t.Fatal(err)
	}

	t.Run("JoinRotateDelete", env.testJoinRotateDelete)
	t.Run("BadInput", env.testBadInput)
	t.Run("NameCollision", env.testNameCollision)
	t.Run("Deletion", env.testDeletion)
	t.Run("Available", env.testAvailable)
	t.Run("ServerWithSlashNames", env.testServer)
	t.Run("CRDLate", env.testCRDLate)
	t.Run("V1Beta1", env.testV1Beta1)
	t.Run("Options", env.testOptions)
	t.Run("ThroughServer", env.testThroughServer)
}

type clusterAPIEnv struct {
	*secretEnv
	memberClient client.Client
}

func installCRD(t *testing.T, cfg *rest.Config, crd func() (*apiextensionsv1.CustomResourceDefinition, error)) {
	t.Helper()
	c, err := crd()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{c}}); err != nil {
		t.Fatal(err)
	}
}

func (e *clusterAPIEnv) watchCAPI(t *testing.T, hostCfg *rest.Config, opts ...configwatcher.ClusterAPIOption) *recorder {
	t.Helper()
	opts = append([]configwatcher.ClusterAPIOption{configwatcher.WithLogger(testr.New(t))}, opts...)
	return startRecorder(t, func() (configwatcher.ConfigWatcher, error) {
		return configwatcher.NewClusterAPIWatcher(hostCfg, opts...)
	})
}

// capiCluster is a Cluster of the given version (v1beta2 or v1beta1),
// with an optional finalizer that holds it in deletion.
func capiCluster(ns, name, version string, finalizers ...string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"controlPlaneEndpoint": map[string]any{"host": "example.invalid", "port": int64(6443)}},
	}}
	u.SetAPIVersion("cluster.x-k8s.io/" + version)
	u.SetKind("Cluster")
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetFinalizers(finalizers)
	return u
}

// setStatus writes a Cluster's status, and returns when it did.
func setStatus(t *testing.T, c client.Client, u *unstructured.Unstructured, status map[string]any) time.Time {
	t.Helper()
	u.Object["status"] = status
	at := time.Now()
	if err := c.Status().Update(t.Context(), u); err != nil {
		t.Fatal(err)
	}
	return at
}

func conditions(typeStatus ...string) []any {
	out := make([]any, 0, len(typeStatus)/2)
	for i := 0; i+1 < len(typeStatus); i += 2 {
		out = append(out, map[string]any{
			"type": typeStatus[i], "status": typeStatus[i+1], "reason": "Test",
			"lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339),
		})
	}
	return out
}

// initializedV1Beta2 is the status of a v1beta2 Cluster whose control
// plane is initialized.
var initializedV1Beta2 = map[string]any{"initialization": map[string]any{"infrastructureProvisioned": true, "controlPlaneInitialized": true}}

// kubeconfigSecret is a Cluster's kubeconfig Secret as Cluster API writes
// it: labelled, typed, the kubeconfig under "value".
func kubeconfigSecret(ns, cluster string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: cluster + "-kubeconfig",
			Labels: map[string]string{configwatcher.ClusterAPIClusterNameLabel: cluster},
		},
		Type: "cluster.x-k8s.io/secret",
		Data: data,
	}
}

// join creates an initialized v1beta2 Cluster and its kubeconfig Secret
// reaching the member with token.
func (e *clusterAPIEnv) join(t *testing.T, ns, name, token string) (*unstructured.Unstructured, *corev1.Secret) {
	t.Helper()
	s := kubeconfigSecret(ns, name, map[string][]byte{"value": e.kubeconfigFor(t, token)})
	cl := capiCluster(ns, name, "v1beta2")
	create(t, e.hostClient, s, cl)
	setStatus(t, e.hostClient, cl, initializedV1Beta2)
	return cl, s
}

// testJoinRotateDelete: with the defaults (every namespace), a Cluster is
// published once initialized, follows its rotated kubeconfig, and goes
// with the Cluster; changes that alter no config are no event. The host
// serves both versions: v1beta2 is read.
func (e *clusterAPIEnv) testJoinRotateDelete(t *testing.T) {
	ns := e.namespace(t)
	r := e.watchCAPI(t, e.host.Config)
	r.quiet(kfQuiet)

	s := kubeconfigSecret(ns, "wl", map[string][]byte{"value": e.kubeconfigFor(t, e.token)})
	cl := capiCluster(ns, "wl", "v1beta2")
	create(t, e.hostClient, s, cl)
	setStatus(t, e.hostClient, cl, map[string]any{"initialization": map[string]any{"infrastructureProvisioned": true}})
	r.quiet(kfQuiet) // not initialized: not published

	at := setStatus(t, e.hostClient, cl, initializedV1Beta2)
	ev := r.event(configwatcher.Added, ns+"/wl")
	t.Logf("figure: Cluster initialized (status update) to Added: %s", time.Since(at))
	if got, want := ev.Config.Source.Object, "Cluster "+ns+"/wl"; got != want {
		t.Errorf("Source.Object = %q, want %q", got, want)
	}
	e.reachesMember(t, ev.Config, e.token)
	r.quiet(kfQuiet)

	// A label of the Cluster is a property: Updated, reached as before.
	cl.SetLabels(map[string]string{"touched": "yes"})
	if err := e.hostClient.Update(t.Context(), cl); err != nil {
		t.Fatal(err)
	}
	before := ev.Config
	ev = r.event(configwatcher.Updated, ns+"/wl")
	if want := map[string]string{configwatcher.LabelPropertyPrefix + "touched": "yes"}; !maps.Equal(ev.Config.Properties, want) ||
		ev.Config.ReachFingerprint() != before.ReachFingerprint() {
		t.Errorf("a label change: Properties %v (want %v), reach changed %v", ev.Config.Properties, want, ev.Config.ReachFingerprint() != before.ReachFingerprint())
	}
	r.quiet(kfQuiet)

	// Changes that leave the config as it was are no event.
	e.update(t, s, func(s *corev1.Secret) { s.Annotations = map[string]string{"touched": "yes"} })
	r.quiet(kfQuiet)

	// Rotation in the Secret alone.
	at = time.Now()
	e.update(t, s, func(s *corev1.Secret) { s.Data["value"] = e.kubeconfigFor(t, e.rotated) })
	ev = r.event(configwatcher.Updated, ns+"/wl")
	t.Logf("figure: kubeconfig Secret rotated to Updated: %s", time.Since(at))
	e.reachesMember(t, ev.Config, e.rotated)
	r.quiet(kfQuiet)

	// v1beta2 is what is read: a Cluster that is initialized only in
	// v1beta1's words (controlPlaneReady) is not, until its v1beta2
	// ControlPlaneInitialized condition says so.
	create(t, e.hostClient, kubeconfigSecret(ns, "old", map[string][]byte{"value": e.kubeconfigFor(t, e.token)}))
	old := capiCluster(ns, "old", "v1beta1")
	create(t, e.hostClient, old)
	setStatus(t, e.hostClient, old, map[string]any{"controlPlaneReady": true})
	r.quiet(kfQuiet)
	setStatus(t, e.hostClient, old, map[string]any{"controlPlaneReady": true, "conditions": conditions("ControlPlaneInitialized", "True")})
	r.event(configwatcher.Added, ns+"/old")

	remove(t, e.hostClient, cl)
	r.event(configwatcher.Deleted, ns+"/wl")
	remove(t, e.hostClient, old)
	r.event(configwatcher.Deleted, ns+"/old")
	r.settled()
}

// testBadInput: each broken Cluster is an error naming it (and its
// Secret), never quoting the kubeconfig; the other clusters keep working;
// a published cluster keeps its last good config.
func (e *clusterAPIEnv) testBadInput(t *testing.T) {
	ns := e.namespace(t)
	r := e.watchCAPI(t, e.host.Config, configwatcher.WithClusterAPINamespaces(ns))
	_, good := e.join(t, ns, "good", e.token)
	r.event(configwatcher.Added, ns+"/good")

	cluster := func(name string) {
		t.Helper()
		cl := capiCluster(ns, name, "v1beta2")
		create(t, e.hostClient, cl)
		setStatus(t, e.hostClient, cl, initializedV1Beta2)
	}
	secret := func(name string, data map[string][]byte) {
		t.Helper()
		create(t, e.hostClient, kubeconfigSecret(ns, name, data))
	}
	named := func(name string) []string {
		return []string{"Cluster " + ns + "/" + name, "Secret " + ns + "/" + name + "-kubeconfig"}
	}

	cluster("nosecret")
	r.err(configwatcher.ErrClusterAPISecretNotFound, named("nosecret")...)

	// Only Secrets with Cluster API's label are read.
	unlabelled := kubeconfigSecret(ns, "unlabelled", map[string][]byte{"value": e.kubeconfigFor(t, e.token)})
	unlabelled.Labels = nil
	create(t, e.hostClient, unlabelled)
	cluster("unlabelled")
	r.err(configwatcher.ErrClusterAPISecretNotFound, append(named("unlabelled"), configwatcher.ClusterAPIClusterNameLabel)...)

	secret("nokey", map[string][]byte{"kubeconfig": e.kubeconfigFor(t, e.token)})
	cluster("nokey")
	r.err(configwatcher.ErrSecretInvalid, append(named("nokey"), `"value"`)...)

	secret("malformed", map[string][]byte{"value": []byte("apiVersion: v1\nkind: Config\nusers: [{name: x, user: {token: " + e.token + "}}\n")})
	cluster("malformed")
	err := r.errFound(configwatcher.ErrSecretInvalid, named("malformed")...)
	if !errors.Is(err, config.ErrInvalidKubeconfig) {
		t.Errorf("error %v does not wrap config.ErrInvalidKubeconfig", err)
	}
	e.noSecrets(t, err)

	// A program that must never run, and a file that must never be read.
	ran := filepath.Join(t.TempDir(), "ran")
	kc := test.KubeconfigFor("member", test.TokenConfig(e.member.Config, ""))
	kc.AuthInfos["member"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
		Command: "/bin/touch", Args: []string{ran}, APIVersion: "client.authentication.k8s.io/v1",
		InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}}
	secret("exec", map[string][]byte{"value": kubeconfigBytes(t, kc)})
	cluster("exec")
	r.err(config.ErrAuthPluginRefused, append(named("exec"), "exec plugin")...)
	kc.AuthInfos["member"] = &clientcmdapi.AuthInfo{TokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token"}
	secret("tokenfile", map[string][]byte{"value": kubeconfigBytes(t, kc)})
	cluster("tokenfile")
	r.err(config.ErrFileReferenceRefused, append(named("tokenfile"), "tokenFile")...)
	r.quiet(kfQuiet)

	// The good cluster is untouched, and still follows its Secret.
	e.update(t, good, func(s *corev1.Secret) { s.Data["value"] = e.kubeconfigFor(t, e.rotated) })
	ev := r.event(configwatcher.Updated, ns+"/good")
	e.reachesMember(t, ev.Config, e.rotated)

	// Broken after it was published: the last good config stays.
	e.update(t, good, func(s *corev1.Secret) { s.Data["value"] = []byte("{" + e.rotated) })
	err = r.errFound(configwatcher.ErrSecretInvalid, append(named("good"), "last good config")...)
	e.noSecrets(t, err)
	r.quiet(kfQuiet)
	e.update(t, good, func(s *corev1.Secret) { s.Data["value"] = e.kubeconfigFor(t, e.rotated) })
	r.quiet(kfQuiet) // fixed with the config it had: nothing to publish

	// The missing Secret arrives: the cluster joins.
	secret("nosecret", map[string][]byte{"value": e.kubeconfigFor(t, e.token)})
	ev = r.event(configwatcher.Added, ns+"/nosecret")
	e.reachesMember(t, ev.Config, e.token)

	// With AllowAuthPlugins the exec kubeconfig is taken, not run (nothing
	// connects); the file reference stays refused.
	ra := e.watchCAPI(t, e.host.Config, configwatcher.WithClusterAPINamespaces(ns), configwatcher.AllowAuthPlugins())
	for _, name := range []string{"exec", "good", "nosecret"} {
		ev := ra.event(configwatcher.Added, ns+"/"+name)
		if name == "exec" && (ev.Config.Config.ExecProvider == nil || ev.Config.Config.ExecProvider.Command != "/bin/touch") {
			t.Errorf("exec plugin not kept: %+v", ev.Config.Config.ExecProvider)
		}
	}
	// The errors of the same sync follow its events; some may have been
	// read while waiting for them.
	ra.quiet(kfQuiet)
	if !slices.ContainsFunc(ra.errs, func(err error) bool {
		return errors.Is(err, config.ErrFileReferenceRefused) && containsAll(err.Error(), named("tokenfile"))
	}) {
		t.Errorf("no error refusing the file reference of tokenfile: %v", ra.errs)
	}
	if _, err := os.Stat(ran); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the exec plugin ran: %v", err)
	}
}

func kubeconfigBytes(t *testing.T, kc clientcmdapi.Config) []byte {
	t.Helper()
	data, err := clientcmd.Write(kc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// testNameCollision: a name function that drops the namespace gives two
// Clusters one name. The Cluster serving it keeps it, the other is an
// error naming both, and takes over once the first is gone.
func (e *clusterAPIEnv) testNameCollision(t *testing.T) {
	first, second := e.namespace(t), e.namespace(t)
	r := e.watchCAPI(t, e.host.Config,
		configwatcher.WithClusterAPINamespaces(first, second),
		configwatcher.WithClusterAPIName(func(_, name string) string { return name }))
	// second/dup is first to serve "dup"; first/dup sorts first.
	kept, _ := e.join(t, second, "dup", e.token)
	r.event(configwatcher.Added, "dup")
	e.join(t, first, "dup", e.rotated)
	err := r.errFound(configwatcher.ErrClusterAPIDuplicateName, "Cluster "+first+"/dup", "Cluster "+second+"/dup")
	e.noSecrets(t, err)
	e.join(t, first, "solo", e.token)
	r.event(configwatcher.Added, "solo")
	r.quiet(kfQuiet)

	remove(t, e.hostClient, kept)
	ev := r.event(configwatcher.Updated, "dup")
	if got, want := ev.Config.Source.Object, "Cluster "+first+"/dup"; got != want {
		t.Errorf("cluster served from %q, want %q", got, want)
	}
	e.reachesMember(t, ev.Config, e.rotated)
	r.quiet(kfQuiet)
}

// testDeletion: by default a cluster stays while its Cluster is being
// deleted (held here by a finalizer), quietly even once its Secret has
// gone, and is Deleted with the Cluster; DeleteOnDeletionStart deletes it
// when the deletion starts.
func (e *clusterAPIEnv) testDeletion(t *testing.T) {
	const finalizer = "test.mccr.dev/hold"
	ns := e.namespace(t)
	r := e.watchCAPI(t, e.host.Config, configwatcher.WithClusterAPINamespaces(ns))
	early := e.watchCAPI(t, e.host.Config, configwatcher.WithClusterAPINamespaces(ns), configwatcher.DeleteOnDeletionStart())
	s := kubeconfigSecret(ns, "held", map[string][]byte{"value": e.kubeconfigFor(t, e.token)})
	cl := capiCluster(ns, "held", "v1beta2", finalizer)
	create(t, e.hostClient, s, cl)
	setStatus(t, e.hostClient, cl, initializedV1Beta2)
	r.event(configwatcher.Added, ns+"/held")
	early.event(configwatcher.Added, ns+"/held")

	remove(t, e.hostClient, cl)
	early.event(configwatcher.Deleted, ns+"/held")
	r.quiet(kfQuiet)
	remove(t, e.hostClient, s) // as Cluster API's garbage collection may
	r.settled()

	if err := e.hostClient.Get(t.Context(), client.ObjectKeyFromObject(cl), cl); err != nil {
		t.Fatal(err)
	}
	cl.SetFinalizers(nil)
	if err := e.hostClient.Update(t.Context(), cl); err != nil {
		t.Fatal(err)
	}
	r.event(configwatcher.Deleted, ns+"/held")
	r.settled()
	early.settled()
}

// testAvailable: RequireAvailable waits for the Available condition, and
// keeps the cluster when it turns False.
func (e *clusterAPIEnv) testAvailable(t *testing.T) {
	ns := e.namespace(t)
	r := e.watchCAPI(t, e.host.Config, configwatcher.WithClusterAPINamespaces(ns))
	avail := e.watchCAPI(t, e.host.Config, configwatcher.WithClusterAPINamespaces(ns), configwatcher.RequireAvailable())
	s := kubeconfigSecret(ns, "a", map[string][]byte{"value": e.kubeconfigFor(t, e.token)})
	cl := capiCluster(ns, "a", "v1beta2")
	create(t, e.hostClient, s, cl)
	status := func(available string) map[string]any {
		return map[string]any{
			"initialization": map[string]any{"controlPlaneInitialized": true},
			"conditions":     conditions("ControlPlaneInitialized", "True", "Available", available),
		}
	}
	setStatus(t, e.hostClient, cl, status("False"))
	r.event(configwatcher.Added, ns+"/a")
	avail.quiet(kfQuiet)

	at := setStatus(t, e.hostClient, cl, status("True"))
	avail.event(configwatcher.Added, ns+"/a")
	t.Logf("figure: Cluster Available (status update) to Added: %s", time.Since(at))
	setStatus(t, e.hostClient, cl, status("False"))
	avail.settled()
	r.settled()
}

// testCRDLate: the member, without Cluster API, serves as the host. The
// watcher starts anyway, reports ErrClusterAPINotInstalled, and publishes
// the clusters once the CRD is installed — v1beta1 only, as management
// clusters before Cluster API v1.11 serve it — within 5s of its creation,
// however long the watcher has waited for it.
func (e *clusterAPIEnv) testCRDLate(t *testing.T) {
	ns := test.NamespaceName(t)
	create(t, e.memberClient, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	r := e.watchCAPI(t, e.member.Config, configwatcher.WithClusterAPINamespaces(ns))
	r.err(configwatcher.ErrClusterAPINotInstalled, config.RedactURL(e.member.Config.Host), "clusters.cluster.x-k8s.io")
	// Long enough for a doubling backoff to have grown past 5s; nothing
	// is asserted of the wait.
	time.Sleep(9 * time.Second)

	created := time.Now()
	installCRD(t, e.member.Config, capicrd.ClusterV1Beta1)
	// The member's own API server stands in for the workload cluster.
	create(t, e.memberClient, kubeconfigSecret(ns, "self", map[string][]byte{"value": e.kubeconfigFor(t, e.token)}))
	cl := capiCluster(ns, "self", "v1beta1")
	create(t, e.memberClient, cl)
	setStatus(t, e.memberClient, cl, map[string]any{"infrastructureReady": true, "controlPlaneReady": true})
	ev := r.event(configwatcher.Added, ns+"/self")
	late := time.Since(created)
	t.Logf("figure: Cluster API CRD created 9s after the watcher started → first Added event: %s", late.Round(time.Millisecond))
	// Discovery is asked every 2 s at most; the rest is this test's own
	// writes and the watch, with room for a loaded machine.
	if late > 10*time.Second {
		t.Errorf("the CRD was created %s before the first Added event, want at most 10s", late.Round(time.Millisecond))
	}
	e.reachesMember(t, ev.Config, e.token)
}

// testV1Beta1: on a host that serves v1beta1 only, a Cluster is
// initialized by controlPlaneReady or its ControlPlaneInitialized
// condition, and Available is read from status.v1beta2.conditions, or
// from the Ready condition of a Cluster API that predates those.
func (e *clusterAPIEnv) testV1Beta1(t *testing.T) {
	installCRD(t, e.member.Config, capicrd.ClusterV1Beta1) // whether or not CRDLate ran
	ns := test.NamespaceName(t)
	create(t, e.memberClient, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	r := e.watchCAPI(t, e.member.Config, configwatcher.WithClusterAPINamespaces(ns))
	avail := e.watchCAPI(t, e.member.Config, configwatcher.WithClusterAPINamespaces(ns), configwatcher.RequireAvailable())
	join := func(name string, status map[string]any) *unstructured.Unstructured {
		t.Helper()
		create(t, e.memberClient, kubeconfigSecret(ns, name, map[string][]byte{"value": e.kubeconfigFor(t, e.token)}))
		cl := capiCluster(ns, name, "v1beta1")
		create(t, e.memberClient, cl)
		setStatus(t, e.memberClient, cl, status)
		return cl
	}

	join("by-condition", map[string]any{"conditions": conditions("ControlPlaneInitialized", "True", "Ready", "False")})
	r.event(configwatcher.Added, ns+"/by-condition")
	avail.quiet(kfQuiet)

	recent := join("recent", map[string]any{
		"controlPlaneReady": true,
		"conditions":        conditions("Ready", "True"),
		"v1beta2":           map[string]any{"conditions": conditions("Available", "False")},
	})
	r.event(configwatcher.Added, ns+"/recent")
	avail.quiet(kfQuiet) // Ready, but Available says otherwise
	setStatus(t, e.memberClient, recent, map[string]any{
		"controlPlaneReady": true,
		"conditions":        conditions("Ready", "True"),
		"v1beta2":           map[string]any{"conditions": conditions("Available", "True")},
	})
	avail.event(configwatcher.Added, ns+"/recent")

	join("before-v1.9", map[string]any{"controlPlaneReady": true, "conditions": conditions("Ready", "True")})
	r.event(configwatcher.Added, ns+"/before-v1.9")
	avail.event(configwatcher.Added, ns+"/before-v1.9")

	remove(t, e.memberClient, recent)
	r.event(configwatcher.Deleted, ns+"/recent")
	avail.event(configwatcher.Deleted, ns+"/recent")
	r.settled()
	avail.settled()
}

// testOptions: what NewClusterAPIWatcher refuses, before any request.
// Options of the other watchers do not compile (TestWatcherOptionsCheckedByCompiler).
func (e *clusterAPIEnv) testOptions(t *testing.T) {
	for name, opts := range map[string][]configwatcher.ClusterAPIOption{
		"empty namespace": {configwatcher.WithClusterAPINamespaces("a", "")},
	} {
		if w, err := configwatcher.NewClusterAPIWatcher(e.host.Config, opts...); err == nil {
			w.Stop()
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := configwatcher.NewClusterAPIWatcher(nil); err == nil {
		t.Error("no error for a nil host config")
	}
	// Stopped at once, and again.
	w, err := configwatcher.NewClusterAPIWatcher(e.host.Config)
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	w.Stop()
	for range w.Events() {
	}
	for range w.Errors() {
	}
}
