package configwatcher_test

import (
	"fmt"
	"hash/fnv"
	"maps"
	"net/url"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	mccrserver "github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// argoEnv is one API server that is both the host of Argo CD's cluster
// Secrets and the cluster they describe: Argo CD's in-cluster Secret means
// the cluster Argo CD runs in, and the other Secrets reach it with a
// ServiceAccount token, as `argocd cluster add` sets up.
type argoEnv struct {
	*secretEnv
	// account is the host ServiceAccount the token belongs to.
	account string
}

// TestSecretWatcherArgoCD runs the Argo CD tests that need the cluster
// Argo CD runs in: in-cluster Secrets, deletion, Properties, namespaced
// clusters (secret_argocd_scope_server_test.go), skip-reconcile.
func TestSecretWatcherArgoCD(t *testing.T) {
	t.Cleanup(func() { leakcheck.VerifyNone(t) })
	f := test.NewFleet(t, test.Options{}, "argo-host")
	host := f.Cluster("argo-host")
	e := &argoEnv{secretEnv: &secretEnv{host: host, member: host}, account: "argocd-manager"}
	var err error
	if e.hostClient, err = client.New(host.Config, client.Options{}); err != nil {
		t.Fatal(err)
	}
	if e.token, err = test.ServiceAccountToken(t.Context(), host.Config, "mccr-system", e.account); err != nil {
		t.Fatal(err)
	}

	t.Run("InCluster", e.testInCluster)
	t.Run("InClusterWithToken", e.testInClusterWithToken)
	t.Run("InClusterDisabled", e.testInClusterDisabled)
	t.Run("DeletionStart", e.testDeletionStart)
	t.Run("Properties", e.testProperties)
	t.Run("PropertiesThroughServer", e.testPropertiesThroughServer)
	t.Run("Namespaced", e.testNamespaced)
	t.Run("NamespacedClusterResources", e.testNamespacedClusterResources)
	t.Run("HostileNamespaces", e.testHostileNamespaces)
	t.Run("SkipReconcile", e.testSkipReconcile)
}

// argoSecretName is the name Argo CD gives the Secret of a cluster it
// registers: "cluster-<host>-<FNV-32a of the server>".
func argoSecretName(t *testing.T, server string) string {
	t.Helper()
	u, err := url.Parse(server)
	if err != nil {
		t.Fatal(err)
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(server))
	return fmt.Sprintf("cluster-%s-%d", strings.ToLower(u.Hostname()), h.Sum32())
}

// argoSecret is a cluster Secret as Argo CD writes it: labelled with its
// secret type, annotated managed-by, data name, server, config and the
// optional keys in extra.
func argoSecret(ns, secretName, name, server string, cfg []byte, extra map[string][]byte) *corev1.Secret {
	data := map[string][]byte{"name": []byte(name), "server": []byte(server), "config": cfg}
	maps.Copy(data, extra)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   ns,
			Name:        secretName,
			Labels:      map[string]string{configwatcher.ArgoCDSecretLabel: configwatcher.ArgoCDSecretLabelValue},
			Annotations: map[string]string{"managed-by": "argocd.argoproj.io"},
		},
		Data: data,
	}
}

func (e *argoEnv) put(t *testing.T, s *corev1.Secret) *corev1.Secret {
	t.Helper()
	if err := e.hostClient.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// inClusterSecret is the Secret Argo CD writes for the cluster it runs in
// (`argocd cluster set in-cluster …`, or a registration of
// https://kubernetes.default.svc): no credentials in its config.
func (e *argoEnv) inClusterSecret(t *testing.T, ns string) *corev1.Secret {
	return argoSecret(ns, argoSecretName(t, configwatcher.ArgoCDInClusterServer), "in-cluster",
		configwatcher.ArgoCDInClusterServer, []byte(`{"tlsClientConfig":{"insecure":false}}`), nil)
}

// whoAmI returns the user cfg authenticates as on the host.
func (e *argoEnv) whoAmI(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	c, err := client.New(rest.CopyConfig(cfg), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ssr := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(t.Context(), ssr); err != nil {
		t.Fatalf("reaching the host with the published config: %v", err)
	}
	return ssr.Status.UserInfo.Username
}

// testInCluster: Argo CD's in-cluster Secret is the host, reached with the
// watcher's own config, under the Secret's name.
func (e *argoEnv) testInCluster(t *testing.T) {
	ns := e.namespace(t)
	r := e.watch(t, configwatcher.ArgoCDFormat(), configwatcher.WithSecretNamespace(ns))
	s := e.put(t, e.inClusterSecret(t, ns))

	ev := r.event(configwatcher.Added, "in-cluster")
	if got, want := ev.Config.Source.Object, "Secret "+ns+"/"+s.Name; got != want {
		t.Errorf("Source.Object = %q, want %q", got, want)
	}
	if ev.Config.Config.Host != e.host.Config.Host {
		t.Fatalf("in-cluster config %s does not reach the host %s", ev.Config.Redacted(), e.host.Config.Host)
	}
	if got, want := e.whoAmI(t, ev.Config.Config), e.whoAmI(t, e.host.Config); got != want {
		t.Errorf("in-cluster config authenticates as %q, want the watcher's own %q", got, want)
	}
	r.settled()

	// With a trailing slash it is the same server to Argo CD.
	e.update(t, s, func(s *corev1.Secret) { s.Data["server"] = []byte(configwatcher.ArgoCDInClusterServer + "/") })
	r.settled()

	if err := e.hostClient.Delete(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	r.event(configwatcher.Deleted, "in-cluster")
	r.settled()
}

// testInClusterWithToken: an in-cluster Secret carrying a bearer token is
// the host reached with that token alone, as Argo CD reaches it.
func (e *argoEnv) testInClusterWithToken(t *testing.T) {
	ns := e.namespace(t)
	r := e.watch(t, configwatcher.ArgoCDFormat(), configwatcher.WithSecretNamespace(ns))
	e.put(t, argoSecret(ns, argoSecretName(t, configwatcher.ArgoCDInClusterServer), "local",
		configwatcher.ArgoCDInClusterServer, e.argoConfig(t, e.token, nil), nil))

	ev := r.event(configwatcher.Added, "local")
	cfg := ev.Config.Config
	if cfg.Host != e.host.Config.Host || cfg.BearerToken != e.token || len(cfg.CertData) > 0 || len(cfg.KeyData) > 0 {
		t.Fatalf("in-cluster config %s: want the host with the Secret's token and no client certificate", ev.Config.Redacted())
	}
	if got, want := e.whoAmI(t, cfg), "system:serviceaccount:mccr-system:"+e.account; got != want {
		t.Errorf("authenticates as %q, want %q", got, want)
	}
	r.settled()
}

// testInClusterDisabled: with DisableArgoCDInCluster the in-cluster Secret
// is refused by name and nothing joins.
func (e *argoEnv) testInClusterDisabled(t *testing.T) {
	ns := e.namespace(t)
	r := e.watch(t, configwatcher.ArgoCDFormat(), configwatcher.WithSecretNamespace(ns), configwatcher.DisableArgoCDInCluster())
	s := e.put(t, e.inClusterSecret(t, ns))

	err := r.errFound(configwatcher.ErrArgoCDInClusterDisabled, "Secret "+ns+"/"+s.Name, `"in-cluster"`, configwatcher.ArgoCDInClusterServer)
	for _, cred := range [][]byte{e.host.Config.KeyData, e.host.Config.CertData, []byte(e.host.Config.BearerToken)} {
		if len(cred) > 0 && strings.Contains(err.Error(), string(cred)) {
			t.Fatalf("error quotes the host's credentials: %v", err)
		}
	}
	r.quiet(kfQuiet)

	// Any other cluster still joins.
	e.put(t, argoSecret(ns, argoSecretName(t, e.host.Config.Host), "other", e.host.Config.Host, e.argoConfig(t, e.token, nil), nil))
	r.event(configwatcher.Added, "other")
	r.quiet(kfQuiet)
}

// testDeletionStart: a Secret whose deletion waits for a finalizer keeps
// its cluster by default, as in Argo CD, and loses it at once with
// ArgoCDDeleteOnDeletionStart.
func (e *argoEnv) testDeletionStart(t *testing.T) {
	const finalizer = "example.com/hold"
	for _, leave := range []bool{false, true} {
		t.Run(fmt.Sprintf("leave=%v", leave), func(t *testing.T) {
			ns := e.namespace(t)
			opts := []configwatcher.SecretOption{configwatcher.ArgoCDFormat(), configwatcher.WithSecretNamespace(ns)}
			if leave {
				opts = append(opts, configwatcher.ArgoCDDeleteOnDeletionStart())
			}
			r := e.watch(t, opts...)
			s := argoSecret(ns, argoSecretName(t, e.host.Config.Host), "leaving", e.host.Config.Host, e.argoConfig(t, e.token, nil), nil)
			s.Finalizers = []string{finalizer}
			e.put(t, s)
			r.event(configwatcher.Added, "leaving")
			r.settled()

			if err := e.hostClient.Delete(t.Context(), s); err != nil {
				t.Fatal(err)
			}
			if leave {
				r.event(configwatcher.Deleted, "leaving")
			}
			r.settled()

			// The finalizer goes: the Secret is gone, and so is its
			// cluster (already, when it left at deletion start).
			if err := e.hostClient.Get(t.Context(), client.ObjectKeyFromObject(s), s); err != nil {
				t.Fatal(err)
			}
			if s.DeletionTimestamp == nil {
				t.Fatal("the Secret's deletion has not started")
			}
			e.update(t, s, func(s *corev1.Secret) { s.Finalizers = nil })
			if !leave {
				r.event(configwatcher.Deleted, "leaving")
			}
			r.settled()
		})
	}
}

// addedSecret is a Secret as `argocd cluster add --project team-a` writes
// it (plus a shard, a label and annotations, as `argocd cluster set` and
// kubectl apply add them).
func (e *argoEnv) addedSecret(t *testing.T, ns string) *corev1.Secret {
	s := argoSecret(ns, argoSecretName(t, e.host.Config.Host), "team-a-cluster", e.host.Config.Host, e.argoConfig(t, e.token, nil),
		map[string][]byte{"project": []byte("team-a"), "shard": []byte("1")})
	s.Labels["env"] = "prod"
	s.Annotations["example.com/owner"] = "team-a"
	s.Annotations[corev1.LastAppliedConfigAnnotation] = `{"apiVersion":"v1","kind":"Secret","stringData":{"config":"{\"bearerToken\":\"` + e.token + `\"}"}}`
	s.Annotations["example.com/huge"] = strings.Repeat("x", 5000)
	return s
}

var wantArgoProperties = map[string]string{
	configwatcher.ArgoCDProjectProperty:                                "team-a",
	configwatcher.ArgoCDShardProperty:                                  "1",
	configwatcher.ArgoCDLabelPropertyPrefix + "env":                    "prod",
	configwatcher.ArgoCDAnnotationPropertyPrefix + "example.com/owner": "team-a",
}

// testProperties: project, shard, labels and annotations become
// Properties (not the secret-type label, Argo CD's managed-by marker,
// kubectl's last-applied copy or an oversized value); a change to them
// alone is an Updated event that reaches the cluster the same way.
func (e *argoEnv) testProperties(t *testing.T) {
	ns := e.namespace(t)
	r := e.watch(t, configwatcher.ArgoCDFormat(), configwatcher.WithSecretNamespace(ns))
	s := e.put(t, e.addedSecret(t, ns))

	ev := r.event(configwatcher.Added, "team-a-cluster")
	if !maps.Equal(ev.Config.Properties, wantArgoProperties) {
		t.Fatalf("Properties = %v, want %v", ev.Config.Properties, wantArgoProperties)
	}
	reach := ev.Config.ReachFingerprint()
	r.settled()

	e.update(t, s, func(s *corev1.Secret) { s.Labels["env"] = "staging"; s.Data["shard"] = []byte("2") })
	ev = r.event(configwatcher.Updated, "team-a-cluster")
	want := maps.Clone(wantArgoProperties)
	want[configwatcher.ArgoCDLabelPropertyPrefix+"env"] = "staging"
	want[configwatcher.ArgoCDShardProperty] = "2"
	if !maps.Equal(ev.Config.Properties, want) {
		t.Fatalf("Properties = %v, want %v", ev.Config.Properties, want)
	}
	if ev.Config.ReachFingerprint() != reach {
		t.Error("a change of Properties alone changed how the cluster is reached")
	}
	r.settled()
}

// testPropertiesThroughServer: a Server fed by the watcher takes changed
// Properties without restarting the member, and shows them.
func (e *argoEnv) testPropertiesThroughServer(t *testing.T) {
	ns := e.namespace(t)
	w, err := configwatcher.NewSecretWatcher(e.host.Config, configwatcher.ArgoCDFormat(), configwatcher.WithSecretNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	srv := newWatchingServer(t, e.host.Config, testr.New(t), w)
	stop := test.Run(t, srv)
	const name = "team-a-cluster"
	s := e.put(t, e.addedSecret(t, ns))
	var mgr any
	test.Eventually(t, kfPatience, name+" Ready with its Properties", func() bool {
		st, err := srv.Status(name)
		if err != nil || st.Phase != mccrserver.PhaseReady || !maps.Equal(st.Properties, wantArgoProperties) {
			return false
		}
		m, err := srv.GetManager(name)
		mgr = m
		return err == nil
	})

	e.update(t, s, func(s *corev1.Secret) { s.Data["project"] = []byte("team-b") })
	test.Eventually(t, kfPatience, name+" with the new project", func() bool {
		st, err := srv.Status(name)
		return err == nil && st.Properties[configwatcher.ArgoCDProjectProperty] == "team-b"
	})
	m, err := srv.GetManager(name)
	if err != nil {
		t.Fatal(err)
	}
	if m != mgr {
		t.Error("a change of Properties alone restarted the member")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
