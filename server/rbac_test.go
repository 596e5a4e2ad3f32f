package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/conntrack"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// configMapsOnly returns a token of the ServiceAccount sa in ns of cluster
// that may read and create ConfigMaps in ns, and nothing else a Manager
// would need: no Secrets. It returns once the API server enforces exactly
// that, with a client that uses the token (closed when the test ends).
func configMapsOnly(t *testing.T, cluster, ns, sa string) (string, client.Client) {
	t.Helper()
	ctx := context.Background()
	cfg := fleet.Cluster(cluster).Config
	tok, err := test.ServiceAccountToken(ctx, cfg, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	admin := adminClient(t, cluster)
	// ServiceAccountToken makes the account cluster-admin; take that back.
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: test.AdminBindingName(ns, sa)}}
	if err := admin.Delete(ctx, crb); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""},
			Resources: []string{"configmaps"},
			Verbs:     []string{"get", "list", "watch", "create"},
		}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	tcfg, conns := conntrack.Wrap(test.TokenConfig(cfg, tok))
	t.Cleanup(conns.Close)
	tc, err := client.New(tcfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var lastSecrets, lastConfigMaps error
	test.Eventually(t, 15*time.Second, "the token may list ConfigMaps but not Secrets", func() bool {
		lastSecrets = tc.List(ctx, &corev1.SecretList{}, client.InNamespace(ns))
		lastConfigMaps = tc.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns))
		if !apierrors.IsForbidden(lastSecrets) || lastConfigMaps != nil {
			t.Logf("not yet: secrets: %v; configmaps: %v", lastSecrets, lastConfigMaps)
			return false
		}
		return true
	})
	return tok, tc
}

// tokenMember is cluster's NamedConfig with tok as its only credential.
func tokenMember(cluster, tok string) *config.NamedConfig {
	return config.NewNamedConfig(cluster, test.TokenConfig(fleet.Cluster(cluster).Config, tok))
}

// secretReconciler records the Secrets it is asked about.
type secretReconciler struct{ seen *tally }

func (r *secretReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster, _ := known.ClusterFrom(ctx)
	r.seen.add(cluster, req.Name)
	return ctrl.Result{}, nil
}

// A member whose identity may not read one kind a controller watches has
// that controller stuck waiting for its cache; every other controller of the
// member works. The 403 is the user's RBAC, not a broken member: it is
// reported, and the member is not restarted for it.
func TestForbiddenKindDoesNotRestartMember(t *testing.T) {
	ns := testNamespace(t)
	tok, _ := configMapsOnly(t, "m3", ns, "configmaps-only")
	// The default CacheSyncTimeout (2m): a restart within the test can only
	// come from the way a 403 is handled.
	r := startServer(t, ns, nil)
	secrets := newTally()
	sr := &secretReconciler{seen: secrets}
	r.srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("secrets-" + ns).For(&corev1.Secret{}).Complete(sr)
	})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hidden", Namespace: ns}}
	if err := adminClient(t, "m3").Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	createConfigMap(t, "m3", ns, "visible")
	if err := r.srv.Add(tokenMember("m3", tok)); err != nil {
		t.Fatal(err)
	}

	var st server.ClusterStatus
	test.Eventually(t, 30*time.Second, "m3's last error says secrets are forbidden", func() bool {
		st, _ = r.srv.Status("m3")
		return st.LastError != nil && strings.Contains(st.LastError.Error(), "secrets") && strings.Contains(st.LastError.Error(), "forbidden")
	})
	t.Logf("m3 is %s; last error: %v", st.Phase, st.LastError)

	// Watch m3 for a while: never restarted, never failed, Ready (a kind it
	// may not read holds up nothing), while its ConfigMap controller works.
	waitReady(t, r.srv, "m3")
	check := func() {
		t.Helper()
		st, err := r.srv.Status("m3")
		switch {
		case err != nil:
			t.Fatal(err)
		case st.Restarts != 0 || st.Failures != 0:
			t.Fatalf("m3 restarted for a forbidden kind: %d restarts, %d failures, %s, last error: %v", st.Restarts, st.Failures, st.Phase, st.LastError)
		case st.Phase != server.PhaseReady:
			t.Fatalf("m3 is %s (last error: %v), want Ready: a kind it may not read must not hold up the others", st.Phase, st.LastError)
		}
	}
	reconciled := map[string]time.Duration{}
	began := time.Now()
	watchUntil := began.Add(10 * time.Second)
	for i := 0; time.Now().Before(watchUntil); i++ {
		check()
		if i == 50 {
			createConfigMap(t, "m3", ns, "meanwhile")
		}
		for _, name := range []string{"visible", "meanwhile"} {
			if _, ok := reconciled[name]; !ok && i%5 == 0 && ackIn(t, "m3", ns, name) == "m3" {
				reconciled[name] = time.Since(began)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	check()
	for _, name := range []string{"visible", "meanwhile"} {
		if _, ok := reconciled[name]; !ok {
			t.Errorf("ConfigMap %s not reconciled in m3 within the %s watched: a kind the member may not read stops its other controllers too", name, time.Since(began).Round(time.Second))
		}
	}
	t.Logf("ConfigMaps reconciled (time into the watch): %v", reconciled)
	if n := secrets.total("m3"); n != 0 {
		t.Errorf("the Secret controller reconciled %d times with an identity that may not read Secrets", n)
	}

	// The missing rule is granted: the Secret controller sees the Secret,
	// without a restart of the member.
	admin := adminClient(t, "m3")
	var role rbacv1.Role
	if err := admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "configmaps-only"}, &role); err != nil {
		t.Fatal(err)
	}
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}})
	if err := admin.Update(context.Background(), &role); err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	test.Eventually(t, 90*time.Second, "the Secret controller reconciles once the rule is granted", func() bool {
		return secrets.count("m3", "hidden") > 0
	})
	t.Logf("figure: forbidden kind granted → its controller reconciles: %s (client-go's list retry backoff)", time.Since(granted).Round(100*time.Millisecond))
	check()
}

// A member whose credentials are revoked (its ServiceAccount deleted, so
// every request is answered 401) fails as soon as it makes a request, and
// is retried; a member next to it with valid credentials carries on.
func TestRevokedTokenFailsMember(t *testing.T) {
	ns := testNamespace(t)
	const sa = "configmaps-only"
	tok, tc := configMapsOnly(t, "m3", ns, sa)
	r := startServer(t, ns, nil)
	if err := r.srv.Add(tokenMember("m3", tok)); err != nil {
		t.Fatal(err)
	}
	addReady(t, r.srv, "m4")
	waitReady(t, r.srv, "m3")
	createConfigMap(t, "m3", ns, "before")
	test.Eventually(t, 15*time.Second, "ConfigMap reconciled in m3", func() bool { return ackIn(t, "m3", ns, "before") == "m3" })

	if err := test.DeleteServiceAccount(context.Background(), fleet.Cluster("m3").Config, ns, sa); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 15*time.Second, "the API server rejects the token", func() bool {
		return apierrors.IsUnauthorized(tc.List(context.Background(), &corev1.ConfigMapList{}, client.InNamespace(ns)))
	})
	revoked := time.Now()
	// Open watches outlive revoked credentials; the next request does not.
	// The reconcile of a new ConfigMap makes one: it writes its ack.
	createConfigMap(t, "m3", ns, "after")

	m4Ready := func() {
		t.Helper()
		if st, _ := r.srv.Status("m4"); st.Phase != server.PhaseReady {
			t.Fatalf("m4 is %s (last error: %v) while m3's credentials are revoked", st.Phase, st.LastError)
		}
	}
	var st server.ClusterStatus
	test.Eventually(t, 30*time.Second, "m3 Failed for rejected credentials", func() bool {
		m4Ready()
		st, _ = r.srv.Status("m3")
		if st.Phase != server.PhaseFailed || st.Failures == 0 || st.LastError == nil {
			return false
		}
		msg := st.LastError.Error()
		return strings.Contains(msg, "rejected") && (strings.Contains(msg, "401") || strings.Contains(msg, "Unauthorized"))
	})
	t.Logf("m3 Failed %s after the revocation: %v", time.Since(revoked).Round(time.Millisecond), st.LastError)
	if strings.Contains(st.LastError.Error(), tok) {
		t.Error("m3's last error holds its token")
	}

	createConfigMap(t, "m4", ns, "still")
	test.Eventually(t, 15*time.Second, "m4 reconciles on", func() bool { return ackIn(t, "m4", ns, "still") == "m4" })
	m4Ready()
	if st, _ := r.srv.Status("m4"); st.Failures != 0 || st.Restarts != 0 {
		t.Errorf("m4: %d failures, %d restarts", st.Failures, st.Restarts)
	}
	// Retries keep failing on the revoked token; the member never comes back
	// as Ready.
	if st, _ := r.srv.Status("m3"); st.Phase == server.PhaseReady {
		t.Errorf("m3 Ready again with a revoked token")
	}
}
