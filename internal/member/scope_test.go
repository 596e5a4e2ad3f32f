package member

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"

	mccrconfig "github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/fakeapi"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/test"
)

// TestNarrowCacheOptions: the namespaces a scoped member caches are those
// of its scope within those the user's cache options ask for; none left
// is an error; the user's maps, shared by every member, stay as they were.
func TestNarrowCacheOptions(t *testing.T) {
	scope := mccrconfig.Scope{Namespaces: []string{"a", "b"}}
	sel := labels.SelectorFromSet(labels.Set{"team": "x"})
	cm, secret := &corev1.ConfigMap{}, &corev1.Secret{}
	for _, tc := range []struct {
		name    string
		def     map[string]cache.Config
		byObj   map[client.Object]cache.ByObject
		wantDef map[string]cache.Config
		wantCM  map[string]cache.Config // ByObject namespaces of ConfigMaps
		wantErr string
	}{
		{name: "none asked: the scope", wantDef: map[string]cache.Config{"a": {}, "b": {}}},
		{
			name:    "some asked: those within",
			def:     map[string]cache.Config{"b": {LabelSelector: sel}, "c": {}},
			wantDef: map[string]cache.Config{"b": {LabelSelector: sel}},
		},
		{
			name:    "all namespaces with settings: the scope with them",
			def:     map[string]cache.Config{cache.AllNamespaces: {LabelSelector: sel}, "a": {}},
			wantDef: map[string]cache.Config{"a": {}, "b": {LabelSelector: sel}},
		},
		{
			name:    "ByObject: nil follows the defaults, empty is every namespace, some are narrowed",
			byObj:   map[client.Object]cache.ByObject{cm: {Namespaces: map[string]cache.Config{"a": {}, "z": {}}}, secret: {Namespaces: map[string]cache.Config{}}},
			wantDef: map[string]cache.Config{"a": {}, "b": {}},
			wantCM:  map[string]cache.Config{"a": {}},
		},
		{name: "nothing in common", def: map[string]cache.Config{"c": {}, "d": {}}, wantErr: "DefaultNamespaces (c, d)"},
		{
			name:    "a ByObject with nothing in common",
			byObj:   map[client.Object]cache.ByObject{cm: {Namespaces: map[string]cache.Config{"z": {}}}},
			wantErr: "ByObject namespaces of *v1.ConfigMap (z)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := cache.Options{DefaultNamespaces: maps.Clone(tc.def), ByObject: maps.Clone(tc.byObj)}
			got, err := narrowCacheOptions(opts, scope, "namespaces a, b only, from Secret argocd/c")
			if tc.wantErr != "" {
				if !errors.Is(err, ErrOutOfScope) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "Secret argocd/c") {
					t.Fatalf("narrowCacheOptions = %v; want ErrOutOfScope naming %q and the scope's source", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !sameConfigs(got.DefaultNamespaces, tc.wantDef) {
				t.Errorf("DefaultNamespaces = %v, want %v", got.DefaultNamespaces, tc.wantDef)
			}
			if tc.byObj != nil {
				if !sameConfigs(got.ByObject[cm].Namespaces, tc.wantCM) {
					t.Errorf("ConfigMap namespaces = %v, want %v", got.ByObject[cm].Namespaces, tc.wantCM)
				}
				if !sameConfigs(got.ByObject[secret].Namespaces, map[string]cache.Config{"a": {}, "b": {}}) {
					t.Errorf("Secret namespaces (every namespace asked) = %v, want the scope", got.ByObject[secret].Namespaces)
				}
			}
			// The caller's maps are untouched.
			if !sameConfigs(opts.DefaultNamespaces, tc.def) || len(opts.ByObject) != len(tc.byObj) {
				t.Error("narrowCacheOptions changed the caller's maps")
			}
			for obj, b := range tc.byObj {
				if !sameConfigs(opts.ByObject[obj].Namespaces, b.Namespaces) {
					t.Errorf("narrowCacheOptions changed the caller's ByObject of %T", obj)
				}
			}
		})
	}
}

// awaitNames waits for every name on ch, in any order.
func awaitNames(t *testing.T, ch <-chan string, d time.Duration, want ...string) {
	t.Helper()
	deadline := time.After(d)
	for len(want) > 0 {
		select {
		case got := <-ch:
			want = slices.DeleteFunc(want, func(n string) bool { return n == got })
		case <-deadline:
			t.Fatalf("not within %v: %q reconciled", d, want)
		}
	}
}

// logLines collects what a funcr logger writes, from any goroutine.
type logLines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logLines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(prefix + " " + args + "\n")
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func sameConfigs(a, b map[string]cache.Config) bool {
	selector := func(c cache.Config) string {
		if c.LabelSelector == nil {
			return "<none>"
		}
		return c.LabelSelector.String()
	}
	return maps.EqualFunc(a, b, func(x, y cache.Config) bool { return selector(x) == selector(y) })
}

// scopedMember builds, on the package's real API server (as an
// administrator: only the scope keeps it out), a member with scope, a
// ConfigMap controller and a ClusterRole controller.
func scopedMember(t *testing.T, scope mccrconfig.Scope) (m *Manager, cms, roles chan string, logs *logLines) {
	t.Helper()
	cfg, _ := onAPIServer(t, apiServer(t))
	logs = &logLines{}
	log := funcr.New(logs.add, funcr.Options{})
	m = buildOn(t, cfg, BuildOptions{
		Options:     Options{Logger: log.WithValues("cluster", "team"), Controller: crconfig.Controller{SkipNameValidation: ptr.To(true)}},
		Scope:       scope,
		ScopeSource: "Secret argocd/cluster-team",
	})
	cms, roles = make(chan string, 100), make(chan string, 100)
	if err := ctrl.NewControllerManagedBy(m).Named("configmaps").For(&corev1.ConfigMap{}).Complete(names(cms)); err != nil {
		t.Fatal(err)
	}
	if err := ctrl.NewControllerManagedBy(m).Named("clusterroles").For(&rbacv1.ClusterRole{}).Complete(names(roles)); err != nil {
		t.Fatal(err)
	}
	return m, cms, roles, logs
}

// TestScopedMember: a member scoped to two namespaces without cluster
// resources caches and reconciles ConfigMaps of those namespaces only; its
// ClusterRole controller waits, reported with the scope's source, while
// the other runs; reads outside the scope fail at once with ErrOutOfScope.
func TestScopedMember(t *testing.T) {
	cl := apiServer(t)
	leakcheck.Cleanup(t)
	_, admin := onAPIServer(t, cl)
	ctx := context.Background()
	nsA, nsB, nsC := createNamespace(t, admin), createNamespace(t, admin), createNamespace(t, admin)
	for _, ns := range []string{nsC, nsA, nsB} {
		if err := admin.Create(ctx, configMap(ns, "cm-"+ns)); err != nil {
			t.Fatal(err)
		}
	}
	role := &rbacv1.ClusterRole{}
	role.Name = test.NamespaceName(t)
	if err := admin.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	scope, err := mccrconfig.NewScope([]string{nsA, nsB}, false)
	if err != nil {
		t.Fatal(err)
	}
	m, cms, roles, logs := scopedMember(t, scope)
	r := run(t, m)
	if !m.WaitForSync(syncCtx(t)) {
		t.Fatal("WaitForSync = false while the ClusterRole controller is outside the scope")
	}
	awaitNames(t, cms, 10*time.Second, "cm-"+nsA, "cm-"+nsB)

	// Only the scope's namespaces are cached, so nothing of the third can
	// be reconciled.
	var list corev1.ConfigMapList
	if err := m.GetCache().List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	for _, cm := range list.Items {
		if cm.Namespace != nsA && cm.Namespace != nsB {
			t.Errorf("ConfigMap %s/%s of a namespace outside the scope is cached", cm.Namespace, cm.Name)
		}
	}

	want := []UnservedKind{{Kind: "rbac.authorization.k8s.io/v1, Kind=ClusterRole"}}
	got := m.UnservedKinds()
	if len(got) != 1 || got[0].Kind != want[0].Kind {
		t.Fatalf("UnservedKinds = %+v, want %+v", got, want)
	}
	for _, part := range []string{"cluster-scoped", "Secret argocd/cluster-team", nsA, nsB, "only"} {
		if !strings.Contains(got[0].Reason, part) {
			t.Errorf("reason %q does not mention %q", got[0].Reason, part)
		}
	}
	if l := logs.String(); !strings.Contains(l, `"cluster"="team"`) || !strings.Contains(l, "ClusterRole") || strings.Count(l, "outside the cluster's scope") != 1 {
		t.Errorf("want one log line naming the cluster and the kind; logs:\n%s", l)
	}

	// Reads outside the scope fail at once, naming it.
	outside := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrOutOfScope) || !strings.Contains(err.Error(), "Secret argocd/cluster-team") {
			t.Errorf("%s = %v, want ErrOutOfScope naming the scope's source", what, err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	outside("Get of a ClusterRole", m.GetClient().Get(rctx, client.ObjectKeyFromObject(role), &rbacv1.ClusterRole{}))
	outside("List of ClusterRoles", m.GetClient().List(rctx, &rbacv1.ClusterRoleList{}))
	outside("Get in a namespace outside the scope", m.GetClient().Get(rctx, client.ObjectKey{Namespace: nsC, Name: "cm-" + nsC}, &corev1.ConfigMap{}))
	outside("List in a namespace outside the scope", m.GetClient().List(rctx, &corev1.ConfigMapList{}, client.InNamespace(nsC)))
	_, err = m.GetCache().GetInformer(rctx, &rbacv1.ClusterRole{})
	outside("GetInformer of ClusterRoles", err)
	if err := m.GetFieldIndexer().IndexField(rctx, &rbacv1.ClusterRole{}, "x", func(client.Object) []string { return nil }); err != nil {
		t.Errorf("IndexField on a kind outside the scope = %v, want nil (never read)", err)
	}
	if rctx.Err() != nil {
		t.Error("a call outside the scope waited")
	}
	// A read the scope allows still works.
	if err := m.GetClient().Get(rctx, client.ObjectKey{Namespace: nsA, Name: "cm-" + nsA}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("Get in the scope = %v", err)
	}
	select {
	case name := <-roles:
		t.Errorf("the ClusterRole controller reconciled %s outside the scope", name)
	default:
	}

	// The member stops promptly with its refused source waiting.
	begin := time.Now()
	if err := r.stop(t); err != nil {
		t.Errorf("Start = %v", err)
	}
	t.Logf("Start returned %v after its ctx ended", time.Since(begin).Round(time.Millisecond))
}

// TestScopedMemberClusterResources: with cluster resources, the same
// member watches ClusterRoles too, and reports nothing.
func TestScopedMemberClusterResources(t *testing.T) {
	cl := apiServer(t)
	leakcheck.Cleanup(t)
	_, admin := onAPIServer(t, cl)
	ctx := context.Background()
	ns := createNamespace(t, admin)
	scope, err := mccrconfig.NewScope([]string{ns}, true)
	if err != nil {
		t.Fatal(err)
	}
	m, cms, roles, _ := scopedMember(t, scope)
	r := run(t, m)
	if !m.WaitForSync(syncCtx(t)) {
		t.Fatal("WaitForSync = false")
	}
	role := &rbacv1.ClusterRole{}
	role.Name = test.NamespaceName(t)
	if err := admin.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, configMap(ns, "x")); err != nil {
		t.Fatal(err)
	}
	awaitNames(t, roles, 10*time.Second, role.Name)
	awaitNames(t, cms, 10*time.Second, "x")
	if got := m.UnservedKinds(); got != nil {
		t.Errorf("UnservedKinds = %+v, want none", got)
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Start = %v", err)
	}
}

// TestScopeRefusedAtBuild: a scope that names no namespace, or cache
// options with nothing in common with it, fail the build, naming why.
func TestScopeRefusedAtBuild(t *testing.T) {
	s := newFake(t)
	_, err := Build(s.Config(), BuildOptions{Scope: mccrconfig.Scope{Namespaces: []string{"Bad"}}, ScopeSource: "Secret argocd/x"})
	if !errors.Is(err, mccrconfig.ErrInvalidScope) || !strings.Contains(err.Error(), "Secret argocd/x") {
		t.Errorf("Build with an invalid scope = %v, want ErrInvalidScope naming its source", err)
	}
	_, err = Build(s.Config(), BuildOptions{
		Scope:       mccrconfig.Scope{Namespaces: []string{"a"}},
		ScopeSource: "Secret argocd/x",
		Cluster:     func(co *cluster.Options) { co.Cache.DefaultNamespaces = map[string]cache.Config{"b": {}} },
	})
	if !errors.Is(err, ErrOutOfScope) || !strings.Contains(err.Error(), "Secret argocd/x") {
		t.Errorf("Build with cache options outside the scope = %v, want ErrOutOfScope naming its source", err)
	}
}

// TestUnservedForbiddenKind: a kind the member's identity may not list is
// reported with its group, version and kind while the other controllers
// run.
func TestUnservedForbiddenKind(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newFake(t, configMap("a", "x"), secret("a", "s"))
	s.Forbid("secrets")
	m := build(t, s, BuildOptions{Options: Options{Controller: crconfig.Controller{SkipNameValidation: ptr.To(true)}}})
	cms := make(chan string, 10)
	if err := ctrl.NewControllerManagedBy(m).Named("configmaps").For(&corev1.ConfigMap{}).Complete(names(cms)); err != nil {
		t.Fatal(err)
	}
	if err := ctrl.NewControllerManagedBy(m).Named("secrets").For(&corev1.Secret{}).Complete(names(make(chan string, 10))); err != nil {
		t.Fatal(err)
	}
	r := run(t, m)
	if !m.WaitForSync(syncCtx(t)) {
		t.Fatal("WaitForSync = false")
	}
	awaitName(t, cms, "x", 10*time.Second, "the ConfigMap controller reconciles")
	got := m.UnservedKinds()
	if len(got) != 1 || got[0].Kind != "/v1, Kind=Secret" || !strings.Contains(got[0].Reason, "may not list or watch") {
		t.Errorf("UnservedKinds = %+v, want Secrets, forbidden", got)
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Start = %v", err)
	}
	if slices.ContainsFunc(got, func(k UnservedKind) bool { return strings.Contains(k.Reason, "scope") }) {
		t.Error("a member of the whole cluster reports a scope")
	}
}

// scopedFakeMember is a member of the fake API server scoped to namespace
// "a", its ConfigMap informer synced; and the plain informer cache its
// reads end in.
func scopedFakeMember(tb testing.TB) (*Manager, cache.Cache) {
	tb.Helper()
	s := fakeapi.New()
	s.Seed(configMap("a", "x"), configMap("b", "y"))
	s.Start()
	tb.Cleanup(s.Close)
	lifetime, end := context.WithCancel(context.Background())
	tb.Cleanup(end)
	m, err := Build(s.Config(), BuildOptions{Lifetime: lifetime, Scope: mccrconfig.Scope{Namespaces: []string{"a"}}, ScopeSource: "Secret argocd/x"})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("member stopped with %v", err)
		}
		<-m.Stopped()
		m.GetHTTPClient().CloseIdleConnections()
	})
	if err := m.GetCache().Get(context.Background(), keyX, &corev1.ConfigMap{}); err != nil {
		tb.Fatal(err)
	}
	scoped, ok := m.GetCache().(*syncNotifyingCache).Cache.(*scopedReads)
	if !ok {
		tb.Fatalf("the scoped member's cache is a %T", m.GetCache().(*syncNotifyingCache).Cache)
	}
	return m, scoped.Cache
}

// TestScopedReadAllocs: a read of a scoped member costs no allocation more
// than the plain informer cache's (a cached Get is the fleet's hot path).
func TestScopedReadAllocs(t *testing.T) {
	leakcheck.Cleanup(t)
	m, plain := scopedFakeMember(t)
	ctx := context.Background()
	cm := &corev1.ConfigMap{}
	get := func(c client.Reader) func() {
		return func() {
			if err := c.Get(ctx, keyX, cm); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := testing.AllocsPerRun(200, get(plain))
	if got := testing.AllocsPerRun(200, get(m.GetCache())); got > want {
		t.Errorf("a scoped Get allocates %v times, the plain cache %v", got, want)
	}
	if err := m.GetCache().Get(ctx, client.ObjectKey{Namespace: "b", Name: "y"}, cm); !errors.Is(err, ErrOutOfScope) {
		t.Errorf("Get outside the scope = %v, want ErrOutOfScope", err)
	}
}

// BenchmarkScopedGet compares a cached Get of a scoped member with one of
// the plain informer cache underneath.
func BenchmarkScopedGet(b *testing.B) {
	m, plain := scopedFakeMember(b)
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		c    client.Reader
	}{{"plain", plain}, {"scoped", m.GetCache()}} {
		b.Run(bc.name, func(b *testing.B) {
			cm := &corev1.ConfigMap{}
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.c.Get(ctx, keyX, cm); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
