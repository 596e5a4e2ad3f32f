package configwatcher_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/mccr-dev/mccr/apis/clusterinventory"
	clusterinventorycrd "github.com/mccr-dev/mccr/apis/clusterinventory/crd"
	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/test"
)

// Access provider names of the test's providers file, in the operator's
// order of preference.
const (
	cpTokenFile = "token-file"
	cpOther     = "other"
)

// clusterProfileEnv is a host cluster serving ClusterProfiles and one
// member cluster they describe, an exec plugin built for the test, and
// the operator's providers file naming it; every subtest works in its own
// namespaces.
type clusterProfileEnv struct {
	host, member *test.Cluster
	hostClient   client.Client
	// plugin is the exec plugin; dir is where it finds the tokens (one
	// file per cluster name the profiles' extension gives) and logs.
	plugin, dir   string
	providersFile string
	// token reaches the member as cluster-admin.
	token string
}

// TestClusterProfileWatcher runs every test of the ClusterProfileWatcher
// under one fleet: two API servers, started once. Only the host serves
// ClusterProfiles (the upstream CRD, v1alpha1 and v1alpha2) until
// CRDLateAndUpgraded installs the CRD into the member.
func TestClusterProfileWatcher(t *testing.T) {
	// Registered first, so it runs last: after the fleet has stopped.
	t.Cleanup(func() { leakcheck.VerifyNone(t) })
	f := test.NewFleet(t, test.Options{}, "cp-host", "cp-member")
	e := &clusterProfileEnv{host: f.Cluster("cp-host"), member: f.Cluster("cp-member"), dir: t.TempDir()}
	installClusterProfileCRD(t, e.host.Config)
	var err error
	if e.hostClient, err = client.New(e.host.Config, client.Options{}); err != nil {
		t.Fatal(err)
	}
	if e.token, err = test.ServiceAccountToken(t.Context(), e.member.Config, "mccr-system", "cp-host"); err != nil {
		t.Fatal(err)
	}
	e.plugin = buildExecPlugin(t)
	e.providersFile = filepath.Join(e.dir, "providers.json")
	e.writeProviders(t, e.providersFile)

	t.Run("JoinChangeDelete", e.testJoinChangeDelete)
	t.Run("BadInput", e.testBadInput)
	t.Run("DuplicateName", e.testDuplicateName)
	t.Run("RefusedName", e.testRefusedName)
	t.Run("PublishUnhealthy", e.testPublishUnhealthy)
	t.Run("NamespacesAndSelector", e.testNamespacesAndSelector)
	t.Run("ProfileSourcedEnv", e.testProfileSourced)
	t.Run("ProfileSourcedArgs", e.testProfileSourcedArgs)
	t.Run("DeletionPending", e.testDeletionPending)
	t.Run("ProvidersFile", e.testProvidersFile)
	t.Run("Members", e.testMembers)
	t.Run("Joined", e.testJoined)
	t.Run("Versions", e.testVersions)
	t.Run("CRDLateAndUpgraded", e.testCRDLateAndUpgraded)
	t.Run("TokenRefreshThroughServer", e.testTokenRefreshThroughServer)
}

func installClusterProfileCRD(t *testing.T, cfg *rest.Config) {
	t.Helper()
	crd, err := clusterinventorycrd.ClusterProfile()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{crd}}); err != nil {
		t.Fatal(err)
	}
}

// buildExecPlugin builds testdata/execplugin into the test's temporary
// directory.
func buildExecPlugin(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the test's exec plugin: %v", err)
	}
	out := filepath.Join(t.TempDir(), "execplugin")
	cmd := exec.CommandContext(t.Context(), goBin, "build", "-o", out, "./testdata/execplugin")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the exec plugin: %v\n%s", err, msg)
	}
	return out
}

// writeProviders writes the operator's providers file: the plugin as two
// providers, told apart by an argument; the second lets profiles add
// arguments and environment variables.
func (e *clusterProfileEnv) writeProviders(t *testing.T, path string) {
	t.Helper()
	provider := func(name string) map[string]any {
		return map[string]any{
			"name": name,
			"execConfig": map[string]any{
				"apiVersion":         "client.authentication.k8s.io/v1",
				"command":            e.plugin,
				"args":               []string{"--dir", e.dir, "--provider=" + name},
				"provideClusterInfo": true,
			},
		}
	}
	other := provider(cpOther)
	other["profileSourcedCLIArgsPolicy"] = "Append"
	other["profileSourcedEnvVarsPolicy"] = "Replace"
	data, err := json.Marshal(map[string]any{"providers": []any{provider(cpTokenFile), other}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (e *clusterProfileEnv) watch(t *testing.T, hostCfg *rest.Config, opts ...configwatcher.ClusterProfileOption) *recorder {
	t.Helper()
	opts = append([]configwatcher.ClusterProfileOption{
		configwatcher.WithLogger(testr.New(t)),
		configwatcher.WithAccessProvidersFile(e.providersFile),
	}, opts...)
	return startRecorder(t, func() (configwatcher.ConfigWatcher, error) {
		return configwatcher.NewClusterProfileWatcher(hostCfg, opts...)
	})
}

func (e *clusterProfileEnv) namespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := test.NamespaceName(t)
	if err := c.Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns},
	}}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// writeToken makes the plugin hand out token for cluster (the clusterName
// of the profiles' exec extension), valid for ttl if not zero. The file is
// replaced at once, as a mounted Secret is.
func (e *clusterProfileEnv) writeToken(t *testing.T, cluster, token string, ttl time.Duration) {
	t.Helper()
	write := func(name, content string) {
		tmp := filepath.Join(e.dir, "."+name)
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(e.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if ttl > 0 {
		write(cluster+".ttl", strings.TrimSuffix(ttl.String(), "s"))
	}
	write(cluster+".token", token)
}

// pluginRun is one run of the exec plugin, as it logged it.
type pluginRun struct {
	Provider string          `json:"provider"`
	Args     []string        `json:"args"`
	Server   string          `json:"server"`
	HasCA    bool            `json:"hasCA"`
	Config   json.RawMessage `json:"config"`
	Env      string          `json:"env"`
}

// pluginRuns are the plugin's runs for cluster, as it logged them.
func (e *clusterProfileEnv) pluginRuns(t *testing.T, cluster string) []pluginRun {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.dir, cluster+".log"))
	if err != nil {
		t.Fatalf("the exec plugin never ran for %s: %v", cluster, err)
	}
	var runs []pluginRun
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var r pluginRun
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	return runs
}

// runs counts the plugin's runs for cluster.
func (e *clusterProfileEnv) runs(t *testing.T, cluster string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.dir, cluster+".log"))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(data, []byte("\n"))
}

// access is a status.accessProviders entry reaching the member through
// provider, its exec extension naming cluster for the plugin; set
// overrides fields of the entry's cluster (nil deletes one).
func (e *clusterProfileEnv) access(provider, cluster string, set map[string]any) map[string]any {
	c := map[string]any{
		"server":                     e.member.Config.Host,
		"certificate-authority-data": base64.StdEncoding.EncodeToString(e.member.Config.CAData),
		"extensions": []any{map[string]any{
			"name":      configwatcher.ClusterExecExtension,
			"extension": map[string]any{"clusterName": cluster},
		}},
	}
	for k, v := range set {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return map[string]any{"name": provider, "cluster": c}
}

func cpConditions(status string) []any {
	return []any{map[string]any{
		"type": configwatcher.ClusterProfileHealthyCondition, "status": status,
		"reason": "Test", "message": "set by the test", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	}}
}

func cpProperties(props map[string]string) []any {
	keys := slices.Sorted(maps.Keys(props))
	out := make([]any, 0, len(keys))
	for _, k := range keys {
		out = append(out, map[string]any{"name": k, "value": props[k]})
	}
	return out
}

// cpStatus is a status: the ControlPlaneHealthy condition ("" for
// none), properties and access providers.
func cpStatus(health string, props map[string]string, providers ...map[string]any) map[string]any {
	s := map[string]any{}
	if health != "" {
		s["conditions"] = cpConditions(health)
	}
	if len(props) > 0 {
		s["properties"] = cpProperties(props)
	}
	list := make([]any, 0, len(providers))
	for _, p := range providers {
		list = append(list, p)
	}
	s["accessProviders"] = list
	return s
}

// createClusterProfile creates a ClusterProfile, then sets its status as a
// cluster manager does, through the status subresource.
func createClusterProfile(t *testing.T, c client.Client, ns, name string, lbls map[string]string, status map[string]any) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "multicluster.x-k8s.io/v1alpha1",
		"kind":       "ClusterProfile",
		"metadata":   map[string]any{"namespace": ns, "name": name},
		"spec":       map[string]any{"displayName": name, "clusterManager": map[string]any{"name": "mccr-test"}},
	}}
	u.SetLabels(lbls)
	if err := c.Create(t.Context(), u); err != nil {
		t.Fatal(err)
	}
	if status != nil {
		setProfileStatus(t, c, u, func(s map[string]any) { maps.Copy(s, status) })
	}
	return u
}

// setProfileStatus changes a profile's status through the status subresource.
func setProfileStatus(t *testing.T, c client.Client, u *unstructured.Unstructured, change func(map[string]any)) {
	t.Helper()
	s, _ := u.Object["status"].(map[string]any)
	if s == nil {
		s = map[string]any{}
	}
	change(s)
	u.Object["status"] = s
	if err := c.Status().Update(t.Context(), u); err != nil {
		t.Fatal(err)
	}
}

// reaches checks that nc reaches the member: the plugin runs, gets the
// cluster info and extension, and its token is accepted.
func (e *clusterProfileEnv) reaches(t *testing.T, nc *config.NamedConfig, cluster, provider string) {
	t.Helper()
	if nc.Config.BearerToken != "" || len(nc.Config.CertData) != 0 || nc.Config.ExecProvider == nil ||
		nc.Config.ExecProvider.Command != e.plugin {
		t.Fatalf("config %s does not get its credentials from the operator's plugin only", nc.Redacted())
	}
	cs, err := kubernetes.NewForConfig(rest.CopyConfig(nc.Config))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(t.Context(), "kube-system", metav1.GetOptions{}); err != nil {
		t.Fatalf("the published config does not reach the member: %v", err)
	}
	// client-go keeps the credentials of a plugin config until they
	// expire, so the run that got them may be an earlier one.
	ran := slices.ContainsFunc(e.pluginRuns(t, cluster), func(run pluginRun) bool {
		var ext struct {
			ClusterName string `json:"clusterName"`
		}
		return json.Unmarshal(run.Config, &ext) == nil && ext.ClusterName == cluster &&
			run.Server == nc.Config.Host && run.HasCA && run.Provider == provider
	})
	if !ran || !slices.Contains(nc.Config.ExecProvider.Args, "--provider="+provider) {
		t.Errorf("no run of provider %s's plugin for %s got the cluster info (server %s, CA, the profile's exec extension): %+v",
			provider, cluster, nc.Config.Host, e.pluginRuns(t, cluster))
	}
}

// testJoinChangeDelete: not healthy → nothing; healthy → Added, reaching
// the member through the plugin; a change of nothing → nothing; of a
// label, of properties, of the endpoint, of the provider → Updated each;
// unhealthy again → kept; deleted → Deleted. (Versions covers the
// deprecated status.credentialProviders.)
func (e *clusterProfileEnv) testJoinChangeDelete(t *testing.T) {
	ns := e.namespace(t, e.hostClient)
	name := ns + "/m1"
	r := e.watch(t, e.host.Config, configwatcher.WithClusterProfileNamespaces(ns))
	e.writeToken(t, "m1", e.token, 0)
	props := map[string]string{configwatcher.ClusterIDProperty: "m1-id", configwatcher.ClusterSetProperty: "set-a", "region": "eu"}
	u := createClusterProfile(t, e.hostClient, ns, "m1", nil, cpStatus("False", props, e.access(cpTokenFile, "m1", nil)))
	r.quiet(kfQuiet)

	start := time.Now()
	setProfileStatus(t, e.hostClient, u, func(s map[string]any) { s["conditions"] = cpConditions("True") })
	ev := r.event(configwatcher.Added, name)
	t.Logf("figure: ClusterProfile healthy → Added event: %s", time.Since(start).Round(time.Millisecond))
	if got, want := ev.Config.Source.Object, "ClusterProfile "+ns+"/m1"; got != want {
		t.Errorf("Source.Object = %q, want %q", got, want)
	}
	want := maps.Clone(props)
	want[configwatcher.ClusterProfileProperty] = ns + "/m1"
	if !maps.Equal(ev.Config.Properties, want) {
		t.Errorf("Properties = %v, want %v", ev.Config.Properties, want)
	}
	e.reaches(t, ev.Config, "m1", cpTokenFile)
	first := ev.Config
	r.quiet(kfQuiet)

	// A condition rewritten with the same status: no change.
	setProfileStatus(t, e.hostClient, u, func(s map[string]any) { s["conditions"] = cpConditions("True") })
	r.quiet(kfQuiet)

	// A label: its property changes, and nothing else.
	u.SetLabels(map[string]string{"touched": "yes"})
	if err := e.hostClient.Update(t.Context(), u); err != nil {
		t.Fatal(err)
	}
	ev = r.event(configwatcher.Updated, name)
	want[configwatcher.LabelPropertyPrefix+"touched"] = "yes"
	if !maps.Equal(ev.Config.Properties, want) || ev.Config.ReachFingerprint() != first.ReachFingerprint() {
		t.Errorf("a label change: Properties %v (want %v), reach changed %v", ev.Config.Properties, want, ev.Config.ReachFingerprint() != first.ReachFingerprint())
	}
	r.quiet(kfQuiet)

	props[configwatcher.ClusterSetProperty] = "set-b"
	want[configwatcher.ClusterSetProperty] = "set-b"
	setProfileStatus(t, e.hostClient, u, func(s map[string]any) { s["properties"] = cpProperties(props) })
	ev = r.event(configwatcher.Updated, name)
	if !maps.Equal(ev.Config.Properties, want) || ev.Config.ReachFingerprint() != first.ReachFingerprint() {
		t.Errorf("a properties change: Properties %v (want %v), reach changed %v", ev.Config.Properties, want, ev.Config.ReachFingerprint() != first.ReachFingerprint())
	}
	r.quiet(kfQuiet)

	// Another endpoint of the same API server (its certificate names
	// localhost too).
	local := strings.Replace(e.member.Config.Host, "127.0.0.1", "localhost", 1)
	setProfileStatus(t, e.hostClient, u, func(s map[string]any) {
		s["accessProviders"] = []any{e.access(cpTokenFile, "m1", map[string]any{"server": local})}
	})
	ev = r.event(configwatcher.Updated, name)
	if ev.Config.Config.Host != local {
		t.Errorf("Host = %s, want %s", ev.Config.Config.Host, local)
	}
	e.reaches(t, ev.Config, "m1", cpTokenFile)
	r.quiet(kfQuiet)

	// Another provider: the profile now lists only the operator's second.
	setProfileStatus(t, e.hostClient, u, func(s map[string]any) { s["accessProviders"] = []any{e.access(cpOther, "m1", nil)} })
	ev = r.event(configwatcher.Updated, name)
	e.reaches(t, ev.Config, "m1", cpOther)
	r.quiet(kfQuiet)

	// Both: the operator's preference decides, whatever the profile's order.
	setProfileStatus(t, e.hostClient, u, func(s map[string]any) {
		s["accessProviders"] = []any{e.access(cpOther, "m1", nil), e.access(cpTokenFile, "m1", nil)}
	})
	ev = r.event(configwatcher.Updated, name)
	e.reaches(t, ev.Config, "m1", cpTokenFile)
	r.quiet(kfQuiet)

	// Unhealthy: the cluster stays.
	setProfileStatus(t, e.hostClient, u, func(s map[string]any) { s["conditions"] = cpConditions("False") })
	r.settled()

	remove(t, e.hostClient, u)
	r.event(configwatcher.Deleted, name)
	r.settled()
}

// noCertificate checks that an error quotes no certificate or token.
func (e *clusterProfileEnv) noCertificate(t *testing.T, err error) {
	t.Helper()
	if strings.Contains(err.Error(), "CERTIFICATE") || strings.Contains(err.Error(), e.token) {
		t.Fatalf("error quotes a certificate or token: %v", err)
	}
}

// testBadInput: each bad profile is an error naming it; a published
// cluster whose profile breaks keeps its last good config; the rest of the
// fleet sees no event. In both versions: read as v1alpha2, a field only
// v1alpha1 has (certificate-authority, a file) never reaches the watcher.
func (e *clusterProfileEnv) testBadInput(t *testing.T) {
	for _, version := range clusterinventory.Versions {
		t.Run(version, func(t *testing.T) { e.testBadInputIn(t, version) })
	}
}

func (e *clusterProfileEnv) testBadInputIn(t *testing.T, version string) {
	ns := e.namespace(t, e.hostClient)
	ref := func(name string) string { return "ClusterProfile " + ns + "/" + name }
	r := e.watch(t, e.host.Config, configwatcher.WithClusterProfileNamespaces(ns), configwatcher.WithClusterProfileVersion(version))

	// Broken but not healthy: waiting, not an error.
	createClusterProfile(t, e.hostClient, ns, "waiting", nil, cpStatus("Unknown", nil, e.access("nobody-knows", "w", nil)))
	good := createClusterProfile(t, e.hostClient, ns, "good", nil, cpStatus("True", nil, e.access(cpTokenFile, "good", nil)))
	r.event(configwatcher.Added, ns+"/good")
	r.settled()

	badCA := base64.StdEncoding.EncodeToString([]byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"))
	for _, c := range []struct {
		name   string
		access map[string]any
		target error
		says   string
	}{
		{"unknown", e.access("nobody-knows", "u", nil), configwatcher.ErrClusterProfileNoAccessProvider, `"nobody-knows"`},
		// (v1alpha1's schema requires a server, and lets an empty one by.)
		{"no-server", e.access(cpTokenFile, "x", map[string]any{"server": ""}), configwatcher.ErrClusterProfileInvalid, "no server"},
		{"bad-url", e.access(cpTokenFile, "x", map[string]any{"server": "ftp://user:hunter2@example.com"}), configwatcher.ErrClusterProfileInvalid, "not an https URL"},
		// Plain http would hand the plugin's credentials to whoever
		// answers, through a proxy or not.
		{"plain-http", e.access(cpTokenFile, "x", map[string]any{"server": "http://127.0.0.1:1"}), configwatcher.ErrClusterProfileInvalid, "not an https URL"},
		{"plain-http-proxy", e.access(cpTokenFile, "x", map[string]any{"server": "http://127.0.0.1:1", "proxy-url": "http://127.0.0.1:2"}), configwatcher.ErrClusterProfileInvalid, "not an https URL"},
		{"bad-ca", e.access(cpTokenFile, "x", map[string]any{"certificate-authority-data": badCA}), configwatcher.ErrClusterProfileInvalid, "no PEM certificate"},
		{"ca-file", e.access(cpTokenFile, "x", map[string]any{"certificate-authority": "/etc/ssl/certs/ca-certificates.crt"}), configwatcher.ErrClusterProfileInvalid, "names a file"},
		{"bad-proxy", e.access(cpTokenFile, "x", map[string]any{"proxy-url": "no-scheme"}), configwatcher.ErrClusterProfileInvalid, "proxy-url"},
	} {
		if c.name == "ca-file" && version != clusterinventory.V1Alpha1 {
			continue
		}
		createClusterProfile(t, e.hostClient, ns, c.name, nil, cpStatus("True", nil, c.access))
		err := r.errFound(c.target, ref(c.name), c.says)
		e.noCertificate(t, err)
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error quotes a password of the server URL: %v", err)
		}
	}
	r.quiet(kfQuiet)

	// insecure-skip-tls-verify is ignored, as the Cluster Inventory API's
	// config builder ignores it: the cluster joins, and its server's
	// certificate is checked against the profile's CA all the same.
	createClusterProfile(t, e.hostClient, ns, "insecure", nil, cpStatus("True", nil, e.access(cpTokenFile, "insecure", map[string]any{"insecure-skip-tls-verify": true})))
	ev := r.event(configwatcher.Added, ns+"/insecure")
	if tls := ev.Config.Config.TLSClientConfig; tls.Insecure || !bytes.Equal(tls.CAData, e.member.Config.CAData) {
		t.Errorf("profile with insecure-skip-tls-verify: TLS insecure %v, CA data kept %v", tls.Insecure, bytes.Equal(tls.CAData, e.member.Config.CAData))
	}
	r.quiet(kfQuiet)

	// The published cluster's profile breaks: its last good config stays.
	setProfileStatus(t, e.hostClient, good, func(s map[string]any) {
		s["accessProviders"] = []any{e.access(cpTokenFile, "good", map[string]any{"certificate-authority-data": badCA})}
	})
	e.noCertificate(t, r.errFound(configwatcher.ErrClusterProfileInvalid, ref("good"), "last good config"))
	r.quiet(kfQuiet)
	// Fixed as it was: nothing to publish.
	setProfileStatus(t, e.hostClient, good, func(s map[string]any) { s["accessProviders"] = []any{e.access(cpTokenFile, "good", nil)} })
	r.quiet(kfQuiet)
}

// testDuplicateName: two profiles given one name by the naming function
// (the cluster ID); the first keeps it, the second is an error naming
// both, and takes over once the first is gone. A profile without an ID is
// left out.
func (e *clusterProfileEnv) testDuplicateName(t *testing.T) {
	ns := e.namespace(t, e.hostClient)
	r := e.watch(t, e.host.Config, configwatcher.WithClusterProfileNamespaces(ns),
		configwatcher.WithClusterProfileName(configwatcher.ClusterProfileClusterID))
	id := map[string]string{configwatcher.ClusterIDProperty: "shared"}
	first := createClusterProfile(t, e.hostClient, ns, "z-first", nil, cpStatus("True", id, e.access(cpTokenFile, "dup", nil)))
	r.event(configwatcher.Added, "shared")
	local := strings.Replace(e.member.Config.Host, "127.0.0.1", "localhost", 1)
	createClusterProfile(t, e.hostClient, ns, "a-second", nil, cpStatus("True", id, e.access(cpTokenFile, "dup", map[string]any{"server": local})))
	r.err(configwatcher.ErrClusterProfileDuplicateCluster, "ClusterProfile "+ns+"/a-second", "ClusterProfile "+ns+"/z-first")
	r.quiet(kfQuiet)
	// Without an ID, the naming function leaves a profile out.
	createClusterProfile(t, e.hostClient, ns, "no-id", nil, cpStatus("True", nil, e.access(cpTokenFile, "dup", nil)))
	r.quiet(kfQuiet)

	remove(t, e.hostClient, first)
	ev := r.event(configwatcher.Updated, "shared")
	if ev.Config.Source.Object != "ClusterProfile "+ns+"/a-second" || ev.Config.Config.Host != local {
		t.Errorf("cluster served from %s at %s, want the remaining profile", ev.Config.Source, ev.Config.Config.Host)
	}
	r.quiet(kfQuiet)
}

// testRefusedName: a profile whose cluster ID is rewritten into a name
// config.ValidateName refuses is broken: its cluster keeps its last good
// config (no Deleted), and a valid ID again renames it as usual.
func (e *clusterProfileEnv) testRefusedName(t *testing.T) {
	ns := e.namespace(t, e.hostClient)
	r := e.watch(t, e.host.Config, configwatcher.WithClusterProfileNamespaces(ns),
		configwatcher.WithClusterProfileName(configwatcher.ClusterProfileClusterID))
	withID := func(id string) func(map[string]any) {
		return func(s map[string]any) {
			s["properties"] = cpProperties(map[string]string{configwatcher.ClusterIDProperty: id})
		}
	}
	u := createClusterProfile(t, e.hostClient, ns, "p", nil, cpStatus("True", map[string]string{configwatcher.ClusterIDProperty: "prod"}, e.access(cpTokenFile, "dup", nil)))
	r.event(configwatcher.Added, "prod")
	r.settled()

	setProfileStatus(t, e.hostClient, u, withID("prod "))
	r.err(config.ErrInvalidName, "ClusterProfile "+ns+"/p", "last good config")
	r.quiet(kfQuiet)

	setProfileStatus(t, e.hostClient, u, withID("prod-2"))
	r.event(configwatcher.Deleted, "prod")
	r.event(configwatcher.Added, "prod-2")
	r.settled()
}

// testPublishUnhealthy: a profile without a ControlPlaneHealthy condition
// joins only with PublishUnhealthy, once it lists an access provider; a
// profile its cluster manager has not written a status for yet is no
// error.
func (e *clusterProfileEnv) testPublishUnhealthy(t *testing.T) {
	ns := e.namespace(t, e.hostClient)
	def := e.watch(t, e.host.Config, configwatcher.WithClusterProfileNamespaces(ns))
	r := e.watch(t, e.host.Config, configwatcher.WithClusterProfileNamespaces(ns), configwatcher.PublishUnhealthy())
	u := createClusterProfile(t, e.hostClient, ns, "new", nil, nil)
	r.settled()
	setProfileStatus(t, e.hostClient, u, func(s map[string]any) { maps.Copy(s, cpStatus("", nil, e.access(cpTokenFile, "new", nil))) })
	r.event(configwatcher.Added, ns+"/new")
	r.noErrors()
	def.settled()
}

// cpAdded waits for Added events of exactly the given names, in any order.
func cpAdded(t *testing.T, r *recorder, names ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	timeout := time.After(kfPatience)
	for len(want) > 0 {
		select {
		case ev := <-r.w.Events():
			if ev.Type != configwatcher.Added || !want[ev.Config.Name] {
				t.Fatalf("unexpected event %s %v, waiting for Added %v", ev.Type, ev.Config, slices.Sorted(maps.Keys(want)))
			}
			delete(want, ev.Config.Name)
		case err := <-r.w.Errors():
			t.Fatalf("unexpected error: %v", err)
		case <-timeout:
			t.Fatalf("no Added for %v within %s", slices.Sorted(maps.Keys(want)), kfPatience)
		}
	}
}

// testNamespacesAndSelector: only the profiles of the watched namespaces,
// and matching the selector, are clusters.
func (e *clusterProfileEnv) testNamespacesAndSelector(t *testing.T) {
	ns1, ns2, ns3 := e.namespace(t, e.hostClient), e.namespace(t, e.hostClient), e.namespace(t, e.hostClient)
	mine := map[string]string{"x-k8s.io/cluster-manager": "mine"}
	for _, ns := range []string{ns1, ns2, ns3} {
		createClusterProfile(t, e.hostClient, ns, "labelled", mine, cpStatus("True", nil, e.access(cpTokenFile, "sel", nil)))
		createClusterProfile(t, e.hostClient, ns, "plain", nil, cpStatus("True", nil, e.access(cpTokenFile, "sel", nil)))
	}
	one := e.watch(t, e.host.Config, configwatcher.WithClusterProfileNamespaces(ns1))
	cpAdded(t, one, ns1+"/labelled", ns1+"/plain")
	sel := e.watch(t, e.host.Config, configwatcher.WithClusterProfileNamespaces(ns1, ns2),
		configwatcher.WithClusterProfileSelector(labels.SelectorFromSet(mine)))
	cpAdded(t, sel, ns1+"/labelled", ns2+"/labelled")
	one.settled()
	sel.settled()
}

// testProfileSourced: a profile adds environment variables to the plugin
// only where the operator's provider allows it; the command is always the
// operator's, whatever the profile's extensions hold. (ProfileSourcedArgs
// covers arguments.)
func (e *clusterProfileEnv) testProfileSourced(t *testing.T) {
	ns := e.namespace(t, e.hostClient)
	r := e.watch(t, e.host.Config, configwatcher.WithClusterProfileNamespaces(ns), configwatcher.PublishUnhealthy())
	for _, c := range []struct{ cluster, provider, env string }{
		{"ps-allowed", cpOther, "from-profile"},
		{"ps-ignored", cpTokenFile, ""},
	} {
		e.writeToken(t, c.cluster, e.token, 0)
		exts := []any{
			map[string]any{"name": configwatcher.ClusterExecExtension, "extension": map[string]any{"clusterName": c.cluster, "command": "/bin/false"}},
			map[string]any{"name": configwatcher.ClusterProfileEnvExtension, "extension": map[string]any{"EXECPLUGIN_EXTRA": "from-profile"}},
		}
		createClusterProfile(t, e.hostClient, ns, c.cluster, nil, cpStatus("", nil, e.access(c.provider, c.cluster, map[string]any{"extensions": exts})))
		ev := r.event(configwatcher.Added, ns+"/"+c.cluster)
		e.reaches(t, ev.Config, c.cluster, c.provider)
		for _, run := range e.pluginRuns(t, c.cluster) {
			if run.Env != c.env {
				t.Errorf("provider %s: the plugin ran with EXECPLUGIN_EXTRA=%q, want %q", c.provider, run.Env, c.env)
			}
		}
	}
}

// testProfileSourcedArgs: the args extension as the API server stores it
// (the CRD declares every extension an object, and refuses a list there)
// appends the profile's arguments to the plugin's command line under
// Append, and only there.
func (e *clusterProfileEnv) testProfileSourcedArgs(t *testing.T) {
	ns := e.namespace(t, e.hostClient)
	r := e.watch(t, e.host.Config, configwatcher.WithClusterProfileNamespaces(ns), configwatcher.PublishUnhealthy())
	profileArgs := []string{"--tenant", "t1", "--region=eu west"}
	exts := func(cluster string, args any) []any {
		return []any{
			map[string]any{"name": configwatcher.ClusterExecExtension, "extension": map[string]any{"clusterName": cluster}},
			map[string]any{"name": configwatcher.ClusterProfileArgsExtension, "extension": args},
		}
	}

	// The bare list is what the schema refuses.
	u := createClusterProfile(t, e.hostClient, ns, "pa-list", nil, nil)
	u.Object["status"] = cpStatus("", nil, e.access(cpOther, "pa-list", map[string]any{"extensions": exts("pa-list", profileArgs)}))
	if err := e.hostClient.Status().Update(t.Context(), u); !apierrors.IsInvalid(err) {
		t.Errorf("a list as the args extension: error %v, want the API server to refuse it as invalid", err)
	}

	for _, c := range []struct {
		cluster, provider string
		want              []string
	}{
		{"pa-append", cpOther, profileArgs},
		{"pa-ignore", cpTokenFile, nil},
	} {
		e.writeToken(t, c.cluster, e.token, 0)
		createClusterProfile(t, e.hostClient, ns, c.cluster, nil, cpStatus("", nil,
			e.access(c.provider, c.cluster, map[string]any{"extensions": exts(c.cluster, map[string]any{"args": profileArgs})})))
		ev := r.event(configwatcher.Added, ns+"/"+c.cluster)
		fixed := []string{"--dir", e.dir, "--provider=" + c.provider}
		if want := append(fixed, c.want...); !slices.Equal(ev.Config.Config.ExecProvider.Args, want) {
			t.Errorf("provider %s: plugin args %q, want %q", c.provider, ev.Config.Config.ExecProvider.Args, want)
		}
		e.reaches(t, ev.Config, c.cluster, c.provider)
		for _, run := range e.pluginRuns(t, c.cluster) {
			if !slices.Equal(run.Args, append(fixed, c.want...)) {
				t.Errorf("provider %s: the plugin ran with %q", c.provider, run.Args)
			}
		}
	}
	r.settled()
}

// testDeletionPending: a profile whose deletion has started, a finalizer
// holding it, keeps its cluster (and follows its changes meanwhile); the
// cluster leaves once the profile is gone.
func (e *clusterProfileEnv) testDeletionPending(t *testing.T) {
	ns := e.namespace(t, e.hostClient)
	name := ns + "/dp"
	r := e.watch(t, e.host.Config, configwatcher.WithClusterProfileNamespaces(ns))
	e.writeToken(t, "dp", e.token, 0)
	const finalizer = "mccr.dev/test-cleanup"
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "multicluster.x-k8s.io/v1alpha1",
		"kind":       "ClusterProfile",
		"metadata":   map[string]any{"namespace": ns, "name": "dp", "finalizers": []any{finalizer}},
		"spec":       map[string]any{"displayName": "dp", "clusterManager": map[string]any{"name": "mccr-test"}},
	}}
	if err := e.hostClient.Create(t.Context(), u); err != nil {
		t.Fatal(err)
	}
	setProfileStatus(t, e.hostClient, u, func(s map[string]any) {
		maps.Copy(s, cpStatus("True", map[string]string{"region": "eu"}, e.access(cpTokenFile, "dp", nil)))
	})
	r.event(configwatcher.Added, name)

	remove(t, e.hostClient, u)
	if err := e.hostClient.Get(t.Context(), client.ObjectKeyFromObject(u), u); err != nil || u.GetDeletionTimestamp() == nil {
		t.Fatalf("the profile is not pending deletion: %v", err)
	}
	// A change made after the deletion started is published: the watcher
	// has seen the deleting profile, and it still serves the cluster.
	setProfileStatus(t, e.hostClient, u, func(s map[string]any) {
		s["properties"] = cpProperties(map[string]string{"region": "us"})
	})
	if ev := r.event(configwatcher.Updated, name); ev.Config.Properties["region"] != "us" {
		t.Errorf("properties %v, want region us", ev.Config.Properties)
	}

	u.SetFinalizers(nil)
	if err := e.hostClient.Update(t.Context(), u); err != nil {
		t.Fatal(err)
	}
	r.event(configwatcher.Deleted, name)
	r.settled()
}

// testProvidersFile: a providers file that cannot be used is an error of
// the constructor naming the file, quoting none of its content.
func (e *clusterProfileEnv) testProvidersFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const one = `{"name":"p","execConfig":{"apiVersion":"client.authentication.k8s.io/v1","command":"/bin/p"}}`
	for _, c := range []struct {
		name, path, says string
	}{
		{"missing", filepath.Join(dir, "absent.json"), "no such file"},
		{"malformed", write("malformed.json", `{"providers": [{"name": "p", "execConfig": {"env": [{"name": "SECRET", "value": "s3cr3t-value"`), "does not parse"},
		{"misspelt", write("misspelt.json", `{"providers":[{"name":"p","exec_config":{}}]}`), "does not parse"},
		{"empty", write("empty.json", `{"providers": []}`), `no "providers"`},
		{"no-command", write("no-command.json", `{"providers":[{"name":"p","execConfig":{"apiVersion":"client.authentication.k8s.io/v1"}}]}`), "no command"},
		{"old-api", write("old-api.json", `{"providers":[{"name":"p","execConfig":{"apiVersion":"client.authentication.k8s.io/v1alpha1","command":"/bin/p"}}]}`), "apiVersion"},
		{"policy", write("policy.json", `{"providers":[`+strings.Replace(one, `"name":"p",`, `"name":"p","profileSourcedCLIArgsPolicy":"Prepend",`, 1)+`]}`), "Prepend"},
		{"twice", write("twice.json", `{"providers":[`+one+`,`+one+`]}`), "used twice"},
		{"directory", dir, "not a regular file"},
	} {
		_, err := configwatcher.NewClusterProfileWatcher(e.host.Config, configwatcher.WithAccessProvidersFile(c.path))
		if !errors.Is(err, configwatcher.ErrAccessProvidersInvalid) || !containsAll(err.Error(), []string{c.path, c.says}) {
			t.Errorf("%s: error %v; want ErrAccessProvidersInvalid naming %s and saying %q", c.name, err, c.path, c.says)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: error quotes the file: %v", c.name, err)
		}
	}
	if _, err := configwatcher.NewClusterProfileWatcher(e.host.Config); !errors.Is(err, configwatcher.ErrAccessProvidersInvalid) {
		t.Errorf("no providers: error %v, want ErrAccessProvidersInvalid", err)
	}
	if _, err := configwatcher.NewClusterProfileWatcher(nil, configwatcher.WithAccessProvidersFile(e.providersFile)); err == nil {
		t.Error("no error for a nil host config")
	}
	// Providers in code work without a file.
	w, err := configwatcher.NewClusterProfileWatcher(e.host.Config, configwatcher.WithAccessProviders(configwatcher.AccessProvider{
		Name: "p", ExecConfig: mustAccessProviders(t, `{"providers":[`+one+`]}`)[0].ExecConfig,
	}))
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
}

func mustAccessProviders(t *testing.T, content string) []configwatcher.AccessProvider {
	t.Helper()
	p := filepath.Join(t.TempDir(), "providers.json")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	ps, err := configwatcher.LoadAccessProviders(p)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}
