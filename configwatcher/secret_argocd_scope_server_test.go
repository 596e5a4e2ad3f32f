package configwatcher_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/testr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/known"
	mccrserver "github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// namespacedAccount sets up what `argocd cluster add --namespace a
// --namespace b` installs on the cluster it adds: a ServiceAccount in
// kube-system, in each namespace a Role allowing everything and a
// RoleBinding of it to the account; with cluster, also a ClusterRoleBinding
// to cluster-admin (the rights `--cluster-resources` needs). It returns a
// token of the account (TokenRequest).
func (e *argoEnv) namespacedAccount(t *testing.T, namespaces []string, cluster bool) string {
	t.Helper()
	ctx := t.Context()
	name := test.NamespaceName(t)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name}}
	objs := []client.Object{sa}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}}
	for _, ns := range namespaces {
		objs = append(objs,
			&rbacv1.Role{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "argocd-manager-role"},
				Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}},
			},
			&rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "argocd-manager-role-binding"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "argocd-manager-role"},
				Subjects:   subject,
			})
	}
	if cluster {
		objs = append(objs, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   subject,
		})
	}
	for _, o := range objs {
		if err := e.hostClient.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	tr := &authenticationv1.TokenRequest{}
	if err := e.hostClient.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatal(err)
	}
	if tr.Status.Token == "" {
		t.Fatal("the API server returned an empty token")
	}
	// The API server's RBAC authorizer learns of new bindings from its own
	// watch: until it has, the token may be refused where it is allowed.
	c, err := client.New(test.TokenConfig(e.host.Config, tr.Status.Token), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range namespaces {
		test.Eventually(t, kfPatience, "the account may list ConfigMaps in "+ns, func() bool {
			return c.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns)) == nil
		})
	}
	if cluster {
		test.Eventually(t, kfPatience, "the account may list ClusterRoles", func() bool {
			return c.List(ctx, &rbacv1.ClusterRoleList{}) == nil
		})
	}
	return tr.Status.Token
}

// namespacedSecret is a cluster Secret as `argocd cluster add --namespace
// a --namespace b` writes it: "namespaces" joined with commas, and
// "clusterResources" only when true.
func (e *argoEnv) namespacedSecret(t *testing.T, ns, name, token string, namespaces []string, clusterResources bool) *corev1.Secret {
	extra := map[string][]byte{"namespaces": []byte(strings.Join(namespaces, ","))}
	if clusterResources {
		extra["clusterResources"] = []byte("true")
	}
	return argoSecret(ns, argoSecretName(t, e.host.Config.Host), name, e.host.Config.Host, e.argoConfig(t, token, nil), extra)
}

// seen records what a controller reconciled, by cluster.
type seen struct {
	mu   sync.Mutex
	keys map[string][]string // cluster → namespace/name
}

func (s *seen) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cluster, _ := known.ClusterFrom(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil {
		s.keys = map[string][]string{}
	}
	s.keys[cluster] = append(s.keys[cluster], req.String())
	return reconcile.Result{}, nil
}

func (s *seen) count(cluster string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys[cluster])
}

func (s *seen) has(cluster, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.keys[cluster], key)
}

// scopedServer is a Server fed by an Argo CD watcher of the Secrets in ns,
// running a ConfigMap controller and a ClusterRole controller.
func (e *argoEnv) scopedServer(t *testing.T, ns string) (srv *mccrserver.Server, cms, roles *seen) {
	t.Helper()
	w, err := configwatcher.NewSecretWatcher(e.host.Config, configwatcher.ArgoCDFormat(), configwatcher.WithSecretNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	srv = newWatchingServer(t, e.host.Config, testr.New(t), w)
	cms, roles = &seen{}, &seen{}
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("configmaps-" + ns).For(&corev1.ConfigMap{}).Complete(cms)
	})
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("clusterroles-" + ns).For(&rbacv1.ClusterRole{}).Complete(roles)
	})
	return srv, cms, roles
}

// createConfigMaps creates a ConfigMap named name in each namespace.
func (e *argoEnv) createConfigMaps(t *testing.T, name string, namespaces ...string) {
	t.Helper()
	for _, ns := range namespaces {
		if err := e.hostClient.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
}

// ready waits for the member to be Ready and returns its status and
// Manager.
func ready(t *testing.T, srv *mccrserver.Server, name string) (mccrserver.ClusterStatus, manager.Manager) {
	t.Helper()
	var st mccrserver.ClusterStatus
	var mgr manager.Manager
	test.Eventually(t, kfPatience, name+" Ready", func() bool {
		var err error
		if st, err = srv.Status(name); err != nil || st.Phase != mccrserver.PhaseReady {
			return false
		}
		mgr, err = srv.GetManager(name)
		return err == nil
	})
	return st, mgr
}

// cachedNamespaces are the namespaces of the ConfigMaps the member's cache
// holds.
func cachedNamespaces(t *testing.T, mgr manager.Manager) []string {
	t.Helper()
	var list corev1.ConfigMapList
	if err := mgr.GetCache().List(t.Context(), &list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, cm := range list.Items {
		if !slices.Contains(out, cm.Namespace) {
			out = append(out, cm.Namespace)
		}
	}
	slices.Sort(out)
	return out
}

// testNamespaced: a cluster added as `argocd cluster add --namespace a
// --namespace b` writes it, with a token allowed in those namespaces only,
// reconciles ConfigMaps there and nowhere else; its ClusterRole controller
// is reported, naming the Secret, while the ConfigMap controller runs and
// the member is Ready without errors. A change of the namespaces restarts
// the member with the new scope.
func (e *argoEnv) testNamespaced(t *testing.T) {
	secretNS := e.namespace(t)
	teamA, teamB, other := e.namespace(t), e.namespace(t), e.namespace(t)
	token := e.namespacedAccount(t, []string{teamA, teamB, other}, false)
	srv, cms, roles := e.scopedServer(t, secretNS)
	stop := test.Run(t, srv)
	const name = "team-cluster"
	s := e.put(t, e.namespacedSecret(t, secretNS, name, token, []string{teamA, teamB}, false))
	source := "Secret " + secretNS + "/" + s.Name

	st, mgr := ready(t, srv, name)
	e.createConfigMaps(t, "cm", teamA, teamB, other)
	test.Eventually(t, kfPatience, "ConfigMaps of both namespaces reconciled", func() bool {
		return cms.has(name, teamA+"/cm") && cms.has(name, teamB+"/cm")
	})
	if got, want := cachedNamespaces(t, mgr), slices.Sorted(slices.Values([]string{teamA, teamB})); !slices.Equal(got, want) {
		t.Errorf("the member caches ConfigMaps of %v, want %v only", got, want)
	}
	if cms.has(name, other+"/cm") {
		t.Errorf("a ConfigMap of %s, outside the Secret's namespaces, was reconciled", other)
	}
	if n := roles.count(name); n > 0 {
		t.Error("the ClusterRole controller ran without clusterResources")
	}
	// The report: the ClusterRole kind, why, naming the Secret.
	test.Eventually(t, kfPatience, "the ClusterRole kind reported", func() bool {
		st, _ = srv.Status(name)
		return len(st.Unserved) > 0
	})
	if len(st.Unserved) != 1 || st.Unserved[0].Kind != "rbac.authorization.k8s.io/v1, Kind=ClusterRole" {
		t.Fatalf("Unserved = %+v, want ClusterRoles", st.Unserved)
	}
	for _, part := range []string{"cluster-scoped", source, teamA, teamB} {
		if !strings.Contains(st.Unserved[0].Reason, part) {
			t.Errorf("Unserved reason %q does not mention %q", st.Unserved[0].Reason, part)
		}
	}
	if st.LastError != nil || st.Phase != mccrserver.PhaseReady {
		t.Errorf("status %s, LastError %v: want Ready without errors", st.Phase, st.LastError)
	}
	// A read of the fan-out client outside the scope says so.
	ctx := known.WithCluster(t.Context(), name)
	var cm corev1.ConfigMap
	if err := srv.GetClient().Get(ctx, client.ObjectKey{Namespace: other, Name: "cm"}, &cm); !errors.Is(err, mccrserver.ErrOutOfScope) {
		t.Errorf("Get outside the namespaces = %v, want ErrOutOfScope", err)
	}

	// The namespaces change: the member restarts with the new scope.
	e.update(t, s, func(s *corev1.Secret) { s.Data["namespaces"] = []byte(teamA + "," + other) })
	var restarted manager.Manager
	test.Eventually(t, kfPatience, "the member restarted with the new namespaces", func() bool {
		_, restarted = ready(t, srv, name)
		return restarted != mgr
	})
	test.Eventually(t, kfPatience, "the new namespace's ConfigMap reconciled", func() bool { return cms.has(name, other+"/cm") })
	if got, want := cachedNamespaces(t, restarted), slices.Sorted(slices.Values([]string{teamA, other})); !slices.Equal(got, want) {
		t.Errorf("after the change the member caches ConfigMaps of %v, want %v", got, want)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// testNamespacedClusterResources: with clusterResources "true" and a token
// with cluster rights, both controllers run and nothing is reported.
func (e *argoEnv) testNamespacedClusterResources(t *testing.T) {
	secretNS := e.namespace(t)
	teamA := e.namespace(t)
	token := e.namespacedAccount(t, []string{teamA}, true)
	srv, cms, roles := e.scopedServer(t, secretNS)
	stop := test.Run(t, srv)
	const name = "team-cluster-wide"
	e.put(t, e.namespacedSecret(t, secretNS, name, token, []string{teamA}, true))
	ready(t, srv, name)
	e.createConfigMaps(t, "cm", teamA)
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: test.NamespaceName(t)}}
	if err := e.hostClient.Create(t.Context(), role); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, kfPatience, "both controllers reconcile", func() bool {
		return cms.has(name, teamA+"/cm") && roles.has(name, "/"+role.Name)
	})
	if st, _ := srv.Status(name); len(st.Unserved) > 0 || st.LastError != nil {
		t.Errorf("Unserved %+v, LastError %v: want neither", st.Unserved, st.LastError)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// testHostileNamespaces: what a Secret's namespaces may hold is normalized
// or refused naming the Secret, never a crash; a cluster already joined
// keeps its last good config meanwhile.
func (e *argoEnv) testHostileNamespaces(t *testing.T) {
	ns := e.namespace(t)
	r := e.watch(t, configwatcher.ArgoCDFormat(), configwatcher.WithSecretNamespace(ns))
	const name = "hostile"
	s := e.put(t, e.namespacedSecret(t, ns, name, e.token, []string{" b ", "a,,b", "", "a"}, false))
	ev := r.event(configwatcher.Added, name)
	if want := (config.Scope{Namespaces: []string{"a", "b"}}); !slices.Equal(ev.Config.Scope.Namespaces, want.Namespaces) || ev.Config.Scope.ClusterResources {
		t.Fatalf("Scope = %+v, want %+v", ev.Config.Scope, want)
	}
	r.settled()

	many := make([]string, 10000)
	for i := range many {
		many[i] = fmt.Sprintf("ns-%d", i)
	}
	source := "Secret " + ns + "/" + s.Name
	for _, bad := range []struct{ value, says string }{
		{strings.Join(many, ","), "10000 namespaces"},
		{"team-a,Team-B", `"Team-B"`},
		{"a,b\x00\xff\u202e", `"b\x00\xff\u202e"`},
		{"*", `not "*"`},
	} {
		e.update(t, s, func(s *corev1.Secret) { s.Data["namespaces"] = []byte(bad.value) })
		err := r.errFound(configwatcher.ErrSecretInvalid, source, `"hostile"`, bad.says, "keeping its last good config")
		if !errors.Is(err, config.ErrInvalidScope) || len(err.Error()) > 600 {
			t.Errorf("error %q: want ErrInvalidScope, briefly", err)
		}
	}
	// clusterResources alone, without namespaces, is the whole cluster;
	// "True" is not "true", as in Argo CD.
	e.update(t, s, func(s *corev1.Secret) {
		s.Data["namespaces"] = []byte("a")
		s.Data["clusterResources"] = []byte("True")
	})
	ev = r.event(configwatcher.Updated, name)
	if ev.Config.Scope.ClusterResources || !slices.Equal(ev.Config.Scope.Namespaces, []string{"a"}) {
		t.Errorf("Scope = %+v, want namespace a without cluster resources", ev.Config.Scope)
	}
	e.update(t, s, func(s *corev1.Secret) {
		delete(s.Data, "namespaces")
		s.Data["clusterResources"] = []byte("true")
	})
	ev = r.event(configwatcher.Updated, name)
	if !ev.Config.Scope.Whole() {
		t.Errorf("Scope = %+v, want the whole cluster", ev.Config.Scope)
	}
	r.settled()
}

// testSkipReconcile: a Secret annotated argocd.argoproj.io/skip-reconcile
// with a true value (as strconv.ParseBool reads it, as Argo CD does) is
// left alone: not joined, or it leaves; any other value is ignored.
func (e *argoEnv) testSkipReconcile(t *testing.T) {
	ns := e.namespace(t)
	r := e.watch(t, configwatcher.ArgoCDFormat(), configwatcher.WithSecretNamespace(ns))
	const name = "skipped"
	s := argoSecret(ns, argoSecretName(t, e.host.Config.Host), name, e.host.Config.Host, e.argoConfig(t, e.token, nil), nil)
	s.Annotations[configwatcher.ArgoCDSkipReconcileAnnotation] = "true"
	e.put(t, s)
	r.settled()

	annotate := func(v string) {
		e.update(t, s, func(s *corev1.Secret) {
			if v == "" {
				delete(s.Annotations, configwatcher.ArgoCDSkipReconcileAnnotation)
			} else {
				s.Annotations[configwatcher.ArgoCDSkipReconcileAnnotation] = v
			}
		})
	}
	annotate("")
	r.event(configwatcher.Added, name)
	r.settled()
	annotate("True")
	r.event(configwatcher.Deleted, name)
	r.settled()
	annotate("false")
	r.event(configwatcher.Added, name)
	r.settled()
	annotate("1")
	r.event(configwatcher.Deleted, name)
	r.settled()
	// Not a boolean: ignored, as Argo CD ignores it; the cluster joins.
	annotate("yes")
	ev := r.event(configwatcher.Added, name)
	if ev.Config.Properties[configwatcher.ArgoCDAnnotationPropertyPrefix+configwatcher.ArgoCDSkipReconcileAnnotation] != "yes" {
		t.Errorf("Properties = %v: the annotation should show as any other", ev.Config.Properties)
	}
	r.settled()
}
