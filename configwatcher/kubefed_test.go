package configwatcher_test

import (
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefedv1beta1 "github.com/mccr-dev/mccr/apis/kubefed/v1beta1"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/test"
)

const (
	// kfPatience bounds every wait for something that should happen; the
	// machine running the tests may be busy.
	kfPatience = 30 * time.Second
	// kfQuiet is how long "nothing more happens" is checked for.
	kfQuiet = time.Second
	// kfErrorDelay is the ErrorDelay of watchers in tests that wait for an
	// error; tests of the default use the default.
	kfErrorDelay = 200 * time.Millisecond
)

// kubeFedEnv is one host cluster with the KubeFed CRDs and one member
// cluster; every subtest works in its own namespace of the host.
type kubeFedEnv struct {
	host, member *test.Cluster
	hostClient   client.Client
	// memberToken reaches the member as cluster-admin, as the token
	// kubefedctl join stores.
	memberToken string
	crdPath     string
}

// TestKubeFed runs every test that needs API servers under one fleet: two
// API servers, started once.
func TestKubeFed(t *testing.T) {
	crdPath, err := test.KubeFedCRDPath()
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs last: after the fleet has stopped.
	t.Cleanup(func() { leakcheck.VerifyNone(t) })
	f := test.NewFleet(t, test.Options{}, "kf-host", "kf-member")
	env := &kubeFedEnv{host: f.Cluster("kf-host"), member: f.Cluster("kf-member"), crdPath: crdPath}
	// Only the host gets the CRDs: the member stands in for a host
	// without KubeFed until TestKubeFed/CRDMissing installs them.
	if err := test.InstallCRDs(env.host.Config, crdPath); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := kubefedv1beta1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := rbacv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if env.hostClient, err = client.New(env.host.Config, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	if env.memberToken, err = test.ServiceAccountToken(t.Context(), env.member.Config, configwatcher.DefaultKubeFedNamespace, "kf-host"); err != nil {
		t.Fatal(err)
	}

	t.Run("JoinRotateUnjoin", env.testJoinRotateUnjoin)
	t.Run("SecretGoneKeepsLastGoodConfig", env.testSecretGone)
	t.Run("SecretLate", env.testSecretLate)
	t.Run("SecretWithoutToken", env.testSecretWithoutToken)
	t.Run("RequireReady", env.testRequireReady)
	t.Run("RelaxedTLSThroughServer", env.testRelaxedTLSThroughServer)
	t.Run("CRDMissing", env.testCRDMissing)
	t.Run("Stop", env.testStop)
}

func (e *kubeFedEnv) watch(t *testing.T, hostCfg *rest.Config, opts ...configwatcher.KubeFedOption) *recorder {
	t.Helper()
	opts = append([]configwatcher.KubeFedOption{configwatcher.WithLogger(testr.New(t))}, opts...)
	return startRecorder(t, func() (configwatcher.ConfigWatcher, error) {
		return configwatcher.NewKubeFedWatcher(hostCfg, opts...)
	})
}

func (e *kubeFedEnv) namespace(t *testing.T, c client.Client, name string) {
	t.Helper()
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
}

// join joins e.member to KubeFed on host (the host, or the member standing
// in for one) as kubefedctl join does: test.JoinKubeFed.
func (e *kubeFedEnv) join(t *testing.T, host *test.Cluster, ns, name, token string) *test.KubeFedJoin {
	t.Helper()
	j, err := test.JoinKubeFed(t.Context(), host.Config, ns, name, e.member.Config, token)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func tokenSecret(ns, name, token string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	if token != "" {
		s.Data["token"] = []byte(token)
	}
	return s
}

// kubeFedCluster describes the member the way kubefedctl join does: its
// endpoint, its CA, and the Secret holding the token.
func (e *kubeFedEnv) kubeFedCluster(ns, name, secret string) *kubefedv1beta1.KubeFedCluster {
	return &kubefedv1beta1.KubeFedCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kubefedv1beta1.KubeFedClusterSpec{
			APIEndpoint: e.member.Config.Host,
			CABundle:    e.member.Config.CAData,
			SecretRef:   kubefedv1beta1.LocalSecretReference{Name: secret},
		},
	}
}

func create(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
}

func remove(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Delete(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
}

// reaches checks that cfg, and nothing else, gets the test through to the
// member's API server.
func (e *kubeFedEnv) reaches(t *testing.T, cfg *rest.Config, wantToken string) {
	t.Helper()
	if cfg.BearerToken != wantToken {
		t.Fatalf("config carries another token than the Secret's")
	}
	if cfg.Host != e.member.Config.Host || len(cfg.CertData) != 0 {
		t.Fatalf("config is not the member's endpoint with a token: host %s", cfg.Host)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(t.Context(), "kube-system", metav1.GetOptions{}); err != nil {
		t.Fatalf("the published config does not reach the member: %v", err)
	}
}

func (e *kubeFedEnv) testJoinRotateUnjoin(t *testing.T) {
	ctx := t.Context()
	ns := configwatcher.DefaultKubeFedNamespace
	e.namespace(t, e.hostClient, ns)
	// Defaults throughout, the default namespace among them.
	r := e.watch(t, e.host.Config)
	r.quiet(kfQuiet)

	// kubefedctl join: the Secret first, then the KubeFedCluster.
	j := e.join(t, e.host, ns, "member", e.memberToken)
	secret, kfc := j.Secret, j.Cluster
	ev := r.event(configwatcher.Added, "member")
	if got, want := ev.Config.Source.Object, "KubeFedCluster "+ns+"/member"; got != want {
		t.Errorf("Source.Object = %q, want %q", got, want)
	}
	e.reaches(t, ev.Config.Config, e.memberToken)
	r.quiet(kfQuiet)

	// Changes that leave the config as it was are no event.
	kfc.Labels = map[string]string{"touched": "yes"}
	if err := e.hostClient.Update(ctx, kfc); err != nil {
		t.Fatal(err)
	}
	secret.Data["unrelated"] = []byte("x")
	if err := e.hostClient.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	r.quiet(kfQuiet)

	// Token rotation: exactly one Updated, carrying the new token.
	rotated, err := test.ServiceAccountToken(ctx, e.member.Config, ns, "kf-host")
	if err != nil {
		t.Fatal(err)
	}
	if err := j.RotateToken(ctx, rotated); err != nil {
		t.Fatal(err)
	}
	ev = r.event(configwatcher.Updated, "member")
	e.reaches(t, ev.Config.Config, rotated)
	r.quiet(kfQuiet)

	// kubefedctl unjoin: the Secret first, then the KubeFedCluster. Exactly
	// one Deleted, and no error even after the default ErrorDelay.
	if err := j.Unjoin(ctx); err != nil {
		t.Fatal(err)
	}
	r.event(configwatcher.Deleted, "member")
	r.quiet(configwatcher.DefaultKubeFedErrorDelay + kfQuiet)
	r.noErrors()
}

func (e *kubeFedEnv) testSecretGone(t *testing.T) {
	ctx := t.Context()
	ns := "kf-secret-gone"
	e.namespace(t, e.hostClient, ns)
	r := e.watch(t, e.host.Config, configwatcher.WithKubeFedNamespace(ns), configwatcher.WithKubeFedErrorDelay(kfErrorDelay))
	j := e.join(t, e.host, ns, "m", e.memberToken)
	r.event(configwatcher.Added, "m")

	// The Secret goes, the KubeFedCluster stays: reported, cluster kept.
	remove(t, e.hostClient, j.Secret)
	r.err(configwatcher.ErrKubeFedSecretNotFound, "KubeFedCluster "+ns+"/m", "Secret "+ns+"/"+j.Secret.Name, "last good config")
	r.quiet(kfQuiet)
	r.noErrors() // reported once

	// Back with the same token: nothing changed.
	back := tokenSecret(ns, j.Secret.Name, e.memberToken)
	back.Data["ca.crt"] = j.Secret.Data["ca.crt"]
	create(t, e.hostClient, back)
	r.quiet(kfQuiet)
	r.noErrors()

	// And the KubeFedCluster's removal is what removes the cluster.
	remove(t, e.hostClient, j.Cluster)
	r.event(configwatcher.Deleted, "m")
	if err := e.hostClient.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	r.quiet(kfQuiet)
	r.noErrors()
}

func (e *kubeFedEnv) testSecretLate(t *testing.T) {
	ns := "kf-secret-late"
	e.namespace(t, e.hostClient, ns)
	r := e.watch(t, e.host.Config, configwatcher.WithKubeFedNamespace(ns), configwatcher.WithKubeFedErrorDelay(kfErrorDelay))
	create(t, e.hostClient, e.kubeFedCluster(ns, "late", "late-token"))
	r.err(configwatcher.ErrKubeFedSecretNotFound, "KubeFedCluster "+ns+"/late", "Secret "+ns+"/late-token")
	r.quiet(kfQuiet)
	r.noErrors()
	create(t, e.hostClient, tokenSecret(ns, "late-token", e.memberToken))
	ev := r.event(configwatcher.Added, "late")
	e.reaches(t, ev.Config.Config, e.memberToken)
}

func (e *kubeFedEnv) testSecretWithoutToken(t *testing.T) {
	ctx := t.Context()
	ns := "kf-no-token"
	e.namespace(t, e.hostClient, ns)
	r := e.watch(t, e.host.Config, configwatcher.WithKubeFedNamespace(ns), configwatcher.WithKubeFedErrorDelay(kfErrorDelay))
	// A join whose Secret has no token (yet).
	j := e.join(t, e.host, ns, "bad", "")
	secret := j.Secret
	r.err(configwatcher.ErrKubeFedSecretNoToken, "KubeFedCluster "+ns+"/bad", "Secret "+ns+"/"+secret.Name)

	// The same problem is not reported again on every change.
	secret.Labels = map[string]string{"touched": "yes"}
	if err := e.hostClient.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	r.quiet(kfQuiet)
	r.noErrors()

	// A token with a trailing newline, as written from a file, is fixed up.
	if err := j.RotateToken(ctx, e.memberToken+"\n"); err != nil {
		t.Fatal(err)
	}
	ev := r.event(configwatcher.Added, "bad")
	e.reaches(t, ev.Config.Config, e.memberToken)
}

func (e *kubeFedEnv) testRequireReady(t *testing.T) {
	ctx := t.Context()
	ns := "kf-require-ready"
	e.namespace(t, e.hostClient, ns)
	r := e.watch(t, e.host.Config, configwatcher.WithKubeFedNamespace(ns), configwatcher.RequireReady())
	kfc := e.join(t, e.host, ns, "r", e.memberToken).Cluster
	// No status yet: not Ready, not published.
	r.quiet(kfQuiet)

	setReady := func(status corev1.ConditionStatus) {
		t.Helper()
		kfc.Status.Conditions = []kubefedv1beta1.ClusterCondition{{
			Type: kubefedv1beta1.ClusterReady, Status: status, LastProbeTime: metav1.Now(),
		}}
		if err := e.hostClient.Status().Update(ctx, kfc); err != nil {
			t.Fatal(err)
		}
	}
	setReady(corev1.ConditionTrue)
	r.event(configwatcher.Added, "r")
	setReady(corev1.ConditionFalse)
	r.event(configwatcher.Deleted, "r")
	r.quiet(kfQuiet)
	r.noErrors()
}

// CRDMissing: the member, which has no KubeFed CRDs, serves as the host.
// The watcher starts anyway, reports ErrKubeFedNotInstalled, and publishes
// the clusters once the CRDs are installed.
func (e *kubeFedEnv) testCRDMissing(t *testing.T) {
	ns := "kf-crd-missing"
	memberClient, err := client.New(e.member.Config, client.Options{Scheme: e.hostClient.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	e.namespace(t, memberClient, ns)
	r := e.watch(t, e.member.Config, configwatcher.WithKubeFedNamespace(ns), configwatcher.WithKubeFedErrorDelay(kfErrorDelay))
	r.err(configwatcher.ErrKubeFedNotInstalled, e.member.Config.Host, "kubefedclusters.core.kubefed.io")
	time.Sleep(2 * time.Second) // the CRD comes late; nothing is asserted of the wait

	created := time.Now()
	if err := test.InstallCRDs(e.member.Config, e.crdPath); err != nil {
		t.Fatal(err)
	}
	// The member's own API server stands in for the joined cluster.
	e.join(t, e.member, ns, "self", e.memberToken)
	ev := r.event(configwatcher.Added, "self")
	late := time.Since(created)
	t.Logf("figure: KubeFedCluster CRD created 2s after the watcher started → first Added event: %s", late.Round(time.Millisecond))
	// Discovery is asked every 2 s at most; the rest is this test's own
	// writes and the watch, with room for a loaded machine.
	if late > 10*time.Second {
		t.Errorf("the CRD was created %s before the first Added event, want at most 10s", late.Round(time.Millisecond))
	}
	e.reaches(t, ev.Config.Config, e.memberToken)
}

func (e *kubeFedEnv) testStop(t *testing.T) {
	ns := "kf-stop"
	e.namespace(t, e.hostClient, ns)
	e.join(t, e.host, ns, "s", e.memberToken)

	check := func(t *testing.T, w *configwatcher.KubeFedWatcher) {
		t.Helper()
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(w.Stop)
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(kfPatience):
			t.Fatal("Stop did not return")
		}
		w.Stop()
		// Both channels are closed (buffered leftovers may come first).
		for range w.Events() {
		}
		for range w.Errors() {
		}
	}

	t.Run("WithUnreadEvents", func(t *testing.T) {
		r := e.watch(t, e.host.Config, configwatcher.WithKubeFedNamespace(ns))
		// Wait until the event is there, then never read it.
		test.Eventually(t, kfPatience, "an event", func() bool { return len(r.w.Events()) > 0 })
		check(t, r.w.(*configwatcher.KubeFedWatcher))
	})
	t.Run("WhileRetrying", func(t *testing.T) {
		// Nothing listens there: discovery fails and the watcher retries.
		cfg := rest.CopyConfig(e.host.Config)
		cfg.Host = "https://127.0.0.1:1"
		r := e.watch(t, cfg)
		r.err(nil)
		check(t, r.w.(*configwatcher.KubeFedWatcher))
	})
	t.Run("WhileForbidden", func(t *testing.T) {
		// An identity that may not list anything: the informers start but
		// never sync.
		tok, err := test.ServiceAccountToken(t.Context(), e.host.Config, ns, "nobody")
		if err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: test.AdminBindingName(ns, "nobody")}}
		remove(t, e.hostClient, binding)
		cfg := test.TokenConfig(e.host.Config, tok)
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(kfPatience)
		for {
			_, err := cs.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{})
			if apierrors.IsForbidden(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("still allowed after its binding was deleted: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		r := e.watch(t, cfg, configwatcher.WithKubeFedNamespace(ns))
		r.err(nil, "forbidden", "KubeFedCluster")
		check(t, r.w.(*configwatcher.KubeFedWatcher))
	})
	t.Run("Immediately", func(t *testing.T) {
		w, err := configwatcher.NewKubeFedWatcher(e.host.Config, configwatcher.WithKubeFedNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		check(t, w)
	})
	t.Run("NilConfig", func(t *testing.T) {
		if _, err := configwatcher.NewKubeFedWatcher(nil); err == nil {
			t.Fatal("no error for a nil host config")
		}
	})
}
