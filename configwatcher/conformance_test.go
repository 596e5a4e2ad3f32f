package configwatcher_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	capicrd "github.com/mccr-dev/mccr/apis/clusterapi/crd"
	kubefedv1beta1 "github.com/mccr-dev/mccr/apis/kubefed/v1beta1"
	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/test"
	"github.com/mccr-dev/mccr/test/watchertest"
)

// TestConformance runs the conformance kit (package test/watchertest) on
// every built-in watcher, over sources written as the tools that own them
// write them, on one fleet: a host holding every source (with the
// KubeFed, Cluster API and ClusterProfile CRDs) and a member every cluster
// of every source reaches, with one of two ServiceAccount tokens.
func TestConformance(t *testing.T) {
	// Registered first, so it runs last: after the fleet has stopped.
	t.Cleanup(func() { leakcheck.VerifyNone(t) })
	e := newSecretEnv(t, "cf-host", "cf-member")
	installClusterProfileCRD(t, e.host.Config)
	installCRD(t, e.host.Config, capicrd.Cluster)
	kfCRDs, err := test.KubeFedCRDPath()
	if err != nil {
		t.Fatal(err)
	}
	if err := test.InstallCRDs(e.host.Config, kfCRDs); err != nil {
		t.Fatal(err)
	}
	kfScheme := runtime.NewScheme()
	if err := corev1.AddToScheme(kfScheme); err != nil {
		t.Fatal(err)
	}
	if err := kubefedv1beta1.AddToScheme(kfScheme); err != nil {
		t.Fatal(err)
	}
	kfClient, err := client.New(e.host.Config, client.Options{Scheme: kfScheme})
	if err != nil {
		t.Fatal(err)
	}
	cp := &clusterProfileEnv{host: e.host, member: e.member, hostClient: e.hostClient, dir: t.TempDir(), token: e.token}
	cp.plugin = buildExecPlugin(t)
	cp.providersFile = filepath.Join(cp.dir, "providers.json")
	cp.writeProviders(t, cp.providersFile)

	for _, w := range []struct {
		name   string
		source func(*testing.T, *tokenSource) watchertest.Source
	}{
		{"FileWatcher", func(t *testing.T, ts *tokenSource) watchertest.Source {
			return &fileSource{tokenSource: ts, dir: t.TempDir()}
		}},
		{"SecretWatcher", func(_ *testing.T, ts *tokenSource) watchertest.Source {
			return &kubeconfigSecretSource{secretSource{tokenSource: ts, secrets: map[string]*corev1.Secret{}}}
		}},
		{"SecretWatcherArgoCD", func(_ *testing.T, ts *tokenSource) watchertest.Source {
			return &argoCDSource{secretSource{tokenSource: ts, secrets: map[string]*corev1.Secret{}}}
		}},
		{"KubeFedWatcher", func(_ *testing.T, ts *tokenSource) watchertest.Source {
			return &kubeFedSource{tokenSource: ts, client: kfClient, joins: map[string]*test.KubeFedJoin{}}
		}},
		{"ClusterAPIWatcher", func(_ *testing.T, ts *tokenSource) watchertest.Source {
			return &clusterAPISource{tokenSource: ts, capi: &clusterAPIEnv{secretEnv: e}, clusters: map[string]*clusterAPIObjects{}}
		}},
		{"ClusterProfileWatcher", func(_ *testing.T, ts *tokenSource) watchertest.Source {
			return &clusterProfileSource{tokenSource: ts, cp: cp, profiles: map[string]*unstructured.Unstructured{}}
		}},
		{"ClusterProfileWatcherByClusterID", func(_ *testing.T, ts *tokenSource) watchertest.Source {
			return &clusterProfileByIDSource{clusterProfileSource{tokenSource: ts, cp: cp, profiles: map[string]*unstructured.Unstructured{}, byID: true}}
		}},
	} {
		t.Run(w.name, func(t *testing.T) {
			watchertest.Run(t, watchertest.Harness{
				NewSource: func(t *testing.T) watchertest.Source {
					ts := &tokenSource{e: e, t: t}
					if w.name != "FileWatcher" {
						ts.ns = e.namespace(t)
					}
					return w.source(t, ts)
				},
				// Informers see a change within milliseconds, the
				// FileWatcher a debounce (100ms) after it.
				Quiet: 500 * time.Millisecond,
			})
		})
	}
}

// tokenSource is what the sources share: the subtest, its namespace of
// the host, and the member reached with one of two tokens.
type tokenSource struct {
	e  *secretEnv
	t  *testing.T
	ns string
}

func (s *tokenSource) token(c watchertest.Cluster) string {
	if c.Credentials == 0 {
		return s.e.token
	}
	return s.e.rotated
}

func (s *tokenSource) Secrets() []string { return []string{s.e.token, s.e.rotated} }

// Reaches checks that cfg is the member's address with c's token, and
// reads the member with it.
func (s *tokenSource) Reaches(ctx context.Context, cfg *config.NamedConfig, c watchertest.Cluster) error {
	switch {
	case cfg.Config.Host != s.e.member.Config.Host:
		return fmt.Errorf("host %s, want the member's %s", cfg.Config.Host, s.e.member.Config.Host)
	case cfg.Config.BearerToken != s.token(c):
		return errors.New("another token than the cluster's")
	}
	return readsMember(ctx, cfg.Config)
}

// readsMember reads the member with cfg.
func readsMember(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	return err
}

// brokenKubeconfig is a kubeconfig cut short, as a write that was
// interrupted leaves it, with a token in it that no error may quote.
func brokenKubeconfig(token string) []byte {
	return []byte("apiVersion: v1\nkind: Config\nusers: [{name: x, user: {token: " + token + "}}\n")
}

// fileSource is a directory of kubeconfig files, one per cluster, each
// with one context named after it, written as editors and the kubelet
// write files: a new file renamed over the old one.
type fileSource struct {
	*tokenSource
	dir string
}

func (s *fileSource) Watch() (configwatcher.ConfigWatcher, error) {
	return configwatcher.NewFileWatcher(s.dir, configwatcher.WithLogger(testr.New(s.t)))
}

func (s *fileSource) path(c watchertest.Cluster) string {
	return filepath.Join(s.dir, c.Name+".kubeconfig")
}

func (s *fileSource) Write(_ context.Context, c watchertest.Cluster) error {
	writeLikeAnEditor(s.t, s.path(c), s.kubeconfig(c, c.Name))
	return nil
}

func (s *fileSource) WriteNamed(_ context.Context, c watchertest.Cluster, name string) (bool, error) {
	writeLikeAnEditor(s.t, s.path(c), s.kubeconfig(c, name))
	return true, nil
}

// Touch writes the file again with a comment.
func (s *fileSource) Touch(_ context.Context, c watchertest.Cluster) error {
	writeLikeAnEditor(s.t, s.path(c), append(s.kubeconfig(c, c.Name), "# reviewed\n"...))
	return nil
}

func (s *fileSource) Break(_ context.Context, c watchertest.Cluster) error {
	writeLikeAnEditor(s.t, s.path(c), brokenKubeconfig(s.token(c)))
	return nil
}

func (s *fileSource) Delete(_ context.Context, c watchertest.Cluster) error {
	return os.Remove(s.path(c))
}

func (s *fileSource) ClusterName(c watchertest.Cluster) string { return c.Name }

func (s *fileSource) Object(c watchertest.Cluster) string { return s.path(c) }

// kubeconfig is c's kubeconfig with one context, name. A name that is not
// UTF-8 goes in raw: no encoder writes it.
func (s *fileSource) kubeconfig(c watchertest.Cluster, name string) []byte {
	const placeholder = "NAME-PLACEHOLDER"
	inFile := name
	if !utf8.ValidString(name) {
		inFile = placeholder
	}
	data, err := clientcmd.Write(test.KubeconfigFor(inFile, test.TokenConfig(s.e.member.Config, s.token(c))))
	if err != nil {
		s.t.Fatal(err)
	}
	return bytes.ReplaceAll(data, []byte(placeholder), []byte(name))
}

// secretSource is Secrets of one namespace of the host, one per cluster.
type secretSource struct {
	*tokenSource
	secrets map[string]*corev1.Secret
}

// put creates or updates c's Secret, made by build the first time.
func (s *secretSource) put(ctx context.Context, c watchertest.Cluster, build func() *corev1.Secret, data map[string][]byte) error {
	sec := s.secrets[c.Name]
	if sec == nil {
		sec = build()
		sec.Data = data
		if err := s.e.hostClient.Create(ctx, sec); err != nil {
			return err
		}
		s.secrets[c.Name] = sec
		return nil
	}
	sec.Data = data
	return s.e.hostClient.Update(ctx, sec)
}

// annotate sets an annotation on c's Secret, as `kubectl apply` sets its
// last-applied-configuration.
func (s *secretSource) annotate(ctx context.Context, c watchertest.Cluster) error {
	sec := s.secrets[c.Name]
	if sec.Annotations == nil {
		sec.Annotations = map[string]string{}
	}
	sec.Annotations[corev1.LastAppliedConfigAnnotation] = fmt.Sprintf(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":%q,"namespace":%q}}`, sec.Name, sec.Namespace)
	return s.e.hostClient.Update(ctx, sec)
}

func (s *secretSource) delete(ctx context.Context, c watchertest.Cluster) error {
	sec := s.secrets[c.Name]
	delete(s.secrets, c.Name)
	return s.e.hostClient.Delete(ctx, sec)
}

// kubeconfigSecretSource is multicluster-runtime's kubeconfig Secrets, as
// its tooling writes them (`kubectl create secret generic NAME
// --from-file=kubeconfig=…`, labelled): the cluster is named after the
// Secret.
type kubeconfigSecretSource struct{ secretSource }

func (s *kubeconfigSecretSource) Watch() (configwatcher.ConfigWatcher, error) {
	return configwatcher.NewSecretWatcher(s.e.host.Config, configwatcher.WithSecretNamespace(s.ns), configwatcher.WithLogger(testr.New(s.t)))
}

func (s *kubeconfigSecretSource) secret(c watchertest.Cluster) func() *corev1.Secret {
	return func() *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: c.Name, Labels: maps.Clone(mcrLabel)}}
	}
}

func (s *kubeconfigSecretSource) Write(ctx context.Context, c watchertest.Cluster) error {
	return s.put(ctx, c, s.secret(c), map[string][]byte{configwatcher.DefaultSecretKey: s.e.kubeconfigFor(s.t, s.token(c))})
}

func (s *kubeconfigSecretSource) Touch(ctx context.Context, c watchertest.Cluster) error {
	return s.annotate(ctx, c)
}

func (s *kubeconfigSecretSource) Break(ctx context.Context, c watchertest.Cluster) error {
	return s.put(ctx, c, s.secret(c), map[string][]byte{configwatcher.DefaultSecretKey: brokenKubeconfig(s.token(c))})
}

func (s *kubeconfigSecretSource) Delete(ctx context.Context, c watchertest.Cluster) error {
	return s.delete(ctx, c)
}

func (s *kubeconfigSecretSource) ClusterName(c watchertest.Cluster) string { return c.Name }

func (s *kubeconfigSecretSource) Object(c watchertest.Cluster) string {
	return "Secret " + s.ns + "/" + c.Name
}

// argoCDSource is Argo CD's cluster Secrets as Argo CD writes them
// (argoSecret): the cluster is named by the Secret's "name".
type argoCDSource struct{ secretSource }

func (s *argoCDSource) Watch() (configwatcher.ConfigWatcher, error) {
	return configwatcher.NewSecretWatcher(s.e.host.Config, configwatcher.ArgoCDFormat(), configwatcher.WithSecretNamespace(s.ns), configwatcher.WithLogger(testr.New(s.t)))
}

func (s *argoCDSource) secretName(c watchertest.Cluster) string { return "cluster-" + c.Name }

func (s *argoCDSource) write(ctx context.Context, c watchertest.Cluster, name string, cfg []byte) error {
	sec := argoSecret(s.ns, s.secretName(c), name, s.e.member.Config.Host, cfg, nil)
	return s.put(ctx, c, func() *corev1.Secret { return sec }, sec.Data)
}

func (s *argoCDSource) Write(ctx context.Context, c watchertest.Cluster) error {
	return s.write(ctx, c, c.Name, s.e.argoConfig(s.t, s.token(c), nil))
}

func (s *argoCDSource) WriteNamed(ctx context.Context, c watchertest.Cluster, name string) (bool, error) {
	return true, s.write(ctx, c, name, s.e.argoConfig(s.t, s.token(c), nil))
}

func (s *argoCDSource) Touch(ctx context.Context, c watchertest.Cluster) error {
	return s.annotate(ctx, c)
}

// Break cuts the config's JSON short.
func (s *argoCDSource) Break(ctx context.Context, c watchertest.Cluster) error {
	return s.write(ctx, c, c.Name, []byte(`{"bearerToken": "`+s.token(c)+`", `))
}

func (s *argoCDSource) Delete(ctx context.Context, c watchertest.Cluster) error {
	return s.delete(ctx, c)
}

func (s *argoCDSource) ClusterName(c watchertest.Cluster) string { return c.Name }

func (s *argoCDSource) Object(c watchertest.Cluster) string {
	return "Secret " + s.ns + "/" + s.secretName(c)
}

// kubeFedSource is KubeFed's KubeFedClusters and their Secrets, joined,
// rotated and unjoined as kubefedctl does (test.JoinKubeFed).
type kubeFedSource struct {
	*tokenSource
	client client.Client // knows KubeFed's types
	joins  map[string]*test.KubeFedJoin
}

func (s *kubeFedSource) Watch() (configwatcher.ConfigWatcher, error) {
	return configwatcher.NewKubeFedWatcher(s.e.host.Config, configwatcher.WithKubeFedNamespace(s.ns), configwatcher.WithKubeFedLogger(testr.New(s.t)))
}

// join joins c with token, or puts token in its Secret if it is joined.
func (s *kubeFedSource) join(ctx context.Context, c watchertest.Cluster, token string) error {
	if j := s.joins[c.Name]; j != nil {
		return j.RotateToken(ctx, token)
	}
	j, err := test.JoinKubeFed(ctx, s.e.host.Config, s.ns, c.Name, s.e.member.Config, token)
	if err != nil {
		return err
	}
	s.joins[c.Name] = j
	return nil
}

func (s *kubeFedSource) Write(ctx context.Context, c watchertest.Cluster) error {
	return s.join(ctx, c, s.token(c))
}

// Touch is what KubeFed's cluster controller does every few seconds, a
// Ready condition probed again, and a label.
func (s *kubeFedSource) Touch(ctx context.Context, c watchertest.Cluster) error {
	kfc := s.joins[c.Name].Cluster
	kfc.Status.Conditions = []kubefedv1beta1.ClusterCondition{{
		Type: kubefedv1beta1.ClusterReady, Status: corev1.ConditionTrue, LastProbeTime: metav1.Now(),
	}}
	if err := s.client.Status().Update(ctx, kfc); err != nil {
		return err
	}
	kfc.Labels = map[string]string{"touched": "yes"}
	return s.client.Update(ctx, kfc)
}

// Break empties the token, as a join looks before its token is filled in.
func (s *kubeFedSource) Break(ctx context.Context, c watchertest.Cluster) error {
	return s.join(ctx, c, "")
}

func (s *kubeFedSource) Delete(ctx context.Context, c watchertest.Cluster) error {
	j := s.joins[c.Name]
	delete(s.joins, c.Name)
	return j.Unjoin(ctx)
}

func (s *kubeFedSource) ClusterName(c watchertest.Cluster) string { return c.Name }

func (s *kubeFedSource) Object(c watchertest.Cluster) string {
	return "KubeFedCluster " + s.ns + "/" + c.Name
}

// clusterAPIObjects are what Cluster API keeps of one workload cluster.
type clusterAPIObjects struct {
	cluster *unstructured.Unstructured
	secret  *corev1.Secret
}

// clusterAPISource is Cluster API's Clusters and kubeconfig Secrets, as
// its controllers write them (clusterAPIEnv.join): named
// "<namespace>/<name>".
type clusterAPISource struct {
	*tokenSource
	capi     *clusterAPIEnv
	clusters map[string]*clusterAPIObjects
}

func (s *clusterAPISource) Watch() (configwatcher.ConfigWatcher, error) {
	return configwatcher.NewClusterAPIWatcher(s.e.host.Config, configwatcher.WithClusterAPINamespaces(s.ns), configwatcher.WithLogger(testr.New(s.t)))
}

// put creates c's initialized Cluster and its Secret holding kubeconfig,
// or puts kubeconfig in the Secret if it exists.
func (s *clusterAPISource) put(ctx context.Context, c watchertest.Cluster, kubeconfig []byte) error {
	if o := s.clusters[c.Name]; o != nil {
		o.secret.Data = map[string][]byte{"value": kubeconfig}
		return s.e.hostClient.Update(ctx, o.secret)
	}
	o := &clusterAPIObjects{
		secret:  kubeconfigSecret(s.ns, c.Name, map[string][]byte{"value": kubeconfig}),
		cluster: capiCluster(s.ns, c.Name, "v1beta2"),
	}
	create(s.t, s.e.hostClient, o.secret, o.cluster)
	setStatus(s.t, s.e.hostClient, o.cluster, initializedStatus())
	s.clusters[c.Name] = o
	return nil
}

// initializedStatus is a fresh status of an initialized v1beta2 Cluster.
func initializedStatus() map[string]any {
	return map[string]any{"initialization": map[string]any{"infrastructureProvisioned": true, "controlPlaneInitialized": true}}
}

func (s *clusterAPISource) Write(ctx context.Context, c watchertest.Cluster) error {
	return s.put(ctx, c, s.e.kubeconfigFor(s.t, s.token(c)))
}

// Touch is what Cluster API's controllers write on their rounds: a phase,
// conditions probed again. (A label is a property of the cluster: its
// change is an Updated.)
func (s *clusterAPISource) Touch(_ context.Context, c watchertest.Cluster) error {
	status := initializedStatus()
	status["phase"] = "Provisioned"
	status["conditions"] = conditions("InfrastructureReady", "True", "Available", "True")
	setStatus(s.t, s.e.hostClient, s.clusters[c.Name].cluster, status)
	return nil
}

func (s *clusterAPISource) Break(ctx context.Context, c watchertest.Cluster) error {
	return s.put(ctx, c, brokenKubeconfig(s.token(c)))
}

// Delete deletes the Cluster, then its Secret, as Cluster API's garbage
// collection does.
func (s *clusterAPISource) Delete(ctx context.Context, c watchertest.Cluster) error {
	o := s.clusters[c.Name]
	delete(s.clusters, c.Name)
	if err := s.e.hostClient.Delete(ctx, o.cluster); err != nil {
		return err
	}
	return s.e.hostClient.Delete(ctx, o.secret)
}

func (s *clusterAPISource) ClusterName(c watchertest.Cluster) string { return s.ns + "/" + c.Name }

func (s *clusterAPISource) Object(c watchertest.Cluster) string {
	return "Cluster " + s.ns + "/" + c.Name
}

// clusterProfileSource is a Cluster Inventory's ClusterProfiles, as a
// cluster manager writes them (createClusterProfile, setProfileStatus):
// healthy, listing the operator's exec plugin as access provider, whose
// clusterName extension names the plugin's token file; new credentials
// are a new token file and the extension naming it. Clusters are named
// "<namespace>/<name>", or by their cluster ID property with byID.
type clusterProfileSource struct {
	*tokenSource
	cp       *clusterProfileEnv
	profiles map[string]*unstructured.Unstructured
	byID     bool
}

// clusterProfileByIDSource names clusters by a property of the profile's
// status: whoever writes the status chooses any name.
type clusterProfileByIDSource struct{ clusterProfileSource }

func (s *clusterProfileSource) Watch() (configwatcher.ConfigWatcher, error) {
	opts := []configwatcher.ClusterProfileOption{
		configwatcher.WithAccessProvidersFile(s.cp.providersFile),
		configwatcher.WithClusterProfileNamespaces(s.ns),
		configwatcher.WithLogger(testr.New(s.t)),
	}
	if s.byID {
		opts = append(opts, configwatcher.WithClusterProfileName(configwatcher.ClusterProfileClusterID))
	}
	return configwatcher.NewClusterProfileWatcher(s.e.host.Config, opts...)
}

// pluginCluster is the clusterName the plugin is given for c: it finds
// the token in a file of that name.
func (s *clusterProfileSource) pluginCluster(c watchertest.Cluster) string {
	return fmt.Sprintf("%s-%s-%d", s.ns, c.Name, c.Credentials)
}

// put creates c's profile with status, or sets its status.
func (s *clusterProfileSource) put(c watchertest.Cluster, status map[string]any) {
	if u := s.profiles[c.Name]; u != nil {
		setProfileStatus(s.t, s.e.hostClient, u, func(st map[string]any) { maps.Copy(st, status) })
		return
	}
	s.profiles[c.Name] = createClusterProfile(s.t, s.e.hostClient, s.ns, c.Name, nil, status)
}

func (s *clusterProfileSource) write(c watchertest.Cluster, name, provider string) {
	s.cp.writeToken(s.t, s.pluginCluster(c), s.token(c), 0)
	s.put(c, cpStatus("True", map[string]string{configwatcher.ClusterIDProperty: name}, s.cp.access(provider, s.pluginCluster(c), nil)))
}

func (s *clusterProfileSource) Write(_ context.Context, c watchertest.Cluster) error {
	s.write(c, c.Name, cpTokenFile)
	return nil
}

// Touch is the cluster manager's heartbeat: the health condition written
// again. (A label is a property of the cluster: its change is an Updated.)
func (s *clusterProfileSource) Touch(_ context.Context, c watchertest.Cluster) error {
	setProfileStatus(s.t, s.e.hostClient, s.profiles[c.Name], func(st map[string]any) { st["conditions"] = cpConditions("True") })
	return nil
}

// Break lists only an access provider the operator does not know.
func (s *clusterProfileSource) Break(_ context.Context, c watchertest.Cluster) error {
	s.write(c, c.Name, "nobody-knows")
	return nil
}

func (s *clusterProfileSource) Delete(ctx context.Context, c watchertest.Cluster) error {
	u := s.profiles[c.Name]
	delete(s.profiles, c.Name)
	return s.e.hostClient.Delete(ctx, u)
}

func (s *clusterProfileSource) ClusterName(c watchertest.Cluster) string {
	if s.byID {
		return c.Name
	}
	return s.ns + "/" + c.Name
}

func (s *clusterProfileSource) Object(c watchertest.Cluster) string {
	return "ClusterProfile " + s.ns + "/" + c.Name
}

// Reaches checks that cfg runs the operator's plugin for c's token file,
// and reads the member with it.
func (s *clusterProfileSource) Reaches(ctx context.Context, cfg *config.NamedConfig, c watchertest.Cluster) error {
	ep := cfg.Config.ExecProvider
	var told []byte
	if ep != nil {
		if u, ok := ep.Config.(*runtime.Unknown); ok {
			told = u.Raw
		}
	}
	switch {
	case cfg.Config.Host != s.e.member.Config.Host:
		return fmt.Errorf("host %s, want the member's %s", cfg.Config.Host, s.e.member.Config.Host)
	case ep == nil || ep.Command != s.cp.plugin:
		return errors.New("credentials not from the operator's exec plugin")
	case !strings.Contains(string(told), `"`+s.pluginCluster(c)+`"`):
		return fmt.Errorf("the plugin is not told cluster %s, whose token file holds the credentials", s.pluginCluster(c))
	}
	return readsMember(ctx, cfg.Config)
}

// WriteNamed gives c the cluster ID name, if the API takes it: its JSON
// holds only UTF-8, and the CRD bounds a property's length.
func (s *clusterProfileByIDSource) WriteNamed(ctx context.Context, c watchertest.Cluster, name string) (bool, error) {
	if !utf8.ValidString(name) {
		return false, nil
	}
	s.cp.writeToken(s.t, s.pluginCluster(c), s.token(c), 0)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "multicluster.x-k8s.io/v1alpha1",
		"kind":       "ClusterProfile",
		"metadata":   map[string]any{"namespace": s.ns, "name": c.Name},
		"spec":       map[string]any{"displayName": c.Name, "clusterManager": map[string]any{"name": "mccr-test"}},
	}}
	if err := s.e.hostClient.Create(ctx, u); err != nil {
		return false, err
	}
	u.Object["status"] = cpStatus("True", map[string]string{configwatcher.ClusterIDProperty: name}, s.cp.access(cpTokenFile, s.pluginCluster(c), nil))
	if err := s.e.hostClient.Status().Update(ctx, u); err != nil {
		if apierrors.IsInvalid(err) {
			return false, s.e.hostClient.Delete(ctx, u)
		}
		return false, err
	}
	s.profiles[c.Name] = u
	return true, nil
}

// The kit's harness must fit: checked when this file is compiled.
var (
	_ watchertest.NameWriter   = (*fileSource)(nil)
	_ watchertest.NameWriter   = (*argoCDSource)(nil)
	_ watchertest.NameWriter   = (*clusterProfileByIDSource)(nil)
	_ watchertest.SecretHolder = (*kubeFedSource)(nil)
)
