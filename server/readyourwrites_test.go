package server_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// informerKinds runs f for the members' default (lean) informers and for
// client-go's.
func informerKinds(t *testing.T, f func(t *testing.T, clientGo bool)) {
	for _, clientGo := range []bool{false, true} {
		t.Run(fmt.Sprintf("ClientGoInformers=%v", clientGo), func(t *testing.T) { f(t, clientGo) })
	}
}

// consistentServer starts a Server whose clients have controller-runtime's
// read-your-writes consistency on, caching ns (only objects labelled
// cached=yes when selected), with m1 Ready.
func consistentServer(t *testing.T, ns string, clientGo, selected bool) *server.Server {
	t.Helper()
	cacheOpts := cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}
	if selected {
		cacheOpts.DefaultLabelSelector = labels.SelectorFromSet(labels.Set{"cached": "yes"})
	}
	srv, err := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{
		Logger:                 test.Logger(t),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cacheOpts,
		Client:                 client.Options{Cache: &client.CacheOptions{EnableReadYourWritesConsistency: ptr.To(true)}},
	}, func(o *server.Options) { o.ClientGoInformers = clientGo })
	if err != nil {
		t.Fatal(err)
	}
	test.Run(t, srv)
	addReady(t, srv, "m1")
	return srv
}

// TestReadYourWrites: with EnableReadYourWritesConsistency, a read through
// the fan-out client right after a write through it sees the write: Get
// and List after Create, Get after Update, NotFound after Delete, and a
// fleet-wide List after Create.
func TestReadYourWrites(t *testing.T) {
	ns := testNamespace(t)
	informerKinds(t, func(t *testing.T, clientGo bool) {
		srv := consistentServer(t, ns, clientGo, false)
		c := srv.GetClient()
		ctx, cancel := context.WithTimeout(known.WithCluster(context.Background(), "m1"), 30*time.Second)
		defer cancel()
		for i := range 20 {
			name := fmt.Sprintf("ryw-%v-%02d", clientGo, i)
			key := client.ObjectKey{Namespace: ns, Name: name}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"v": "1"}}
			if err := c.Create(ctx, cm); err != nil {
				t.Fatal(err)
			}
			var got corev1.ConfigMap
			if err := c.Get(ctx, key, &got); err != nil {
				t.Fatalf("Get right after Create: %v", err)
			}
			var list corev1.ConfigMapList
			if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil || !hasItem(list.Items, name) {
				t.Fatalf("List right after Create: %v, found %v", err, hasItem(list.Items, name))
			}
			got.Data["v"] = "2"
			if err := c.Update(ctx, &got); err != nil {
				t.Fatal(err)
			}
			if err := c.Get(ctx, key, &got); err != nil || got.Data["v"] != "2" {
				t.Fatalf("Get right after Update: %v, data %v", err, got.Data)
			}
			if err := c.Delete(ctx, &got); err != nil {
				t.Fatal(err)
			}
			if err := c.Get(ctx, key, &got); !apierrors.IsNotFound(err) {
				t.Fatalf("Get right after Delete: %v, want NotFound", err)
			}
		}
		// A fleet-wide List waits for the member's cache as well.
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ryw-fleet-%v", clientGo), Namespace: ns}}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		var list corev1.ConfigMapList
		lctx, lcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer lcancel()
		if err := c.List(lctx, &list, client.InNamespace(ns)); err != nil || !hasItem(list.Items, cm.Name) {
			t.Fatalf("fleet-wide List right after Create: %v, found %v", err, hasItem(list.Items, cm.Name))
		}
	})
}

func hasItem(items []corev1.ConfigMap, name string) bool {
	for _, it := range items {
		if it.Name == name {
			return true
		}
	}
	return false
}

// TestMembersReadTheirOwnCache: client options with CacheOptions set (here
// DisableFor, common in kubebuilder projects) still have every member's
// client read that member's cache, not the host's.
func TestMembersReadTheirOwnCache(t *testing.T) {
	ns := testNamespace(t)
	createConfigMap(t, "m1", ns, "only-in-m1")
	srv, err := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{
		Logger:                 test.Logger(t),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Client:                 client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	test.Run(t, srv)
	addReady(t, srv, "m1", "m2")
	ctx, cancel := context.WithTimeout(known.WithCluster(context.Background(), "m1"), 30*time.Second)
	defer cancel()
	var cm corev1.ConfigMap
	if err := srv.GetClient().Get(ctx, client.ObjectKey{Namespace: ns, Name: "only-in-m1"}, &cm); err != nil {
		t.Fatalf("m1's object through m1's client: %v", err)
	}
	err = srv.GetClient().Get(known.WithCluster(ctx, "m2"), client.ObjectKey{Namespace: ns, Name: "only-in-m1"}, &cm)
	if !apierrors.IsNotFound(err) {
		t.Fatalf("m1's object through m2's client: %v, want NotFound", err)
	}
	var hostList corev1.ConfigMapList
	if err := srv.GetHostClient().List(ctx, &hostList, client.InNamespace(ns)); err != nil || hasItem(hostList.Items, "only-in-m1") {
		t.Fatalf("the host's client: %v, found m1's object: %v", err, hasItem(hostList.Items, "only-in-m1"))
	}
}

// outsideCache creates, through the fan-out client, a ConfigMap the
// member's cache does not hold (it lacks the selected label): a read of it
// then waits for a resource version the cache never sees.
func outsideCache(t *testing.T, srv *server.Server, ns, name string) client.ObjectKey {
	t.Helper()
	ctx, cancel := context.WithTimeout(known.WithCluster(context.Background(), "m1"), 30*time.Second)
	defer cancel()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if err := srv.GetClient().Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	return client.ObjectKeyFromObject(cm)
}

// TestReadYourWritesGetHonoursDeadline: a read that waits for its write to
// reach the cache returns by the caller's deadline.
func TestReadYourWritesGetHonoursDeadline(t *testing.T) {
	ns := testNamespace(t)
	informerKinds(t, func(t *testing.T, clientGo bool) {
		srv := consistentServer(t, ns, clientGo, true)
		key := outsideCache(t, srv, ns, fmt.Sprintf("deadline-%v", clientGo))
		const wait = 2 * time.Second
		ctx, cancel := context.WithTimeout(known.WithCluster(context.Background(), "m1"), wait)
		defer cancel()
		begin := time.Now()
		err := srv.GetClient().Get(ctx, key, &corev1.ConfigMap{})
		took := time.Since(begin)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Get: %v, want the deadline's error", err)
		}
		if took > wait+time.Second {
			t.Errorf("Get returned %s after its %s deadline", took-wait, wait)
		}
	})
}

// waitingForResourceVersion reports whether a goroutine waits in
// controller-runtime's read-your-writes handler.
func waitingForResourceVersion() bool {
	buf := make([]byte, 1<<22)
	n := runtime.Stack(buf, true)
	return strings.Contains(string(buf[:n]), "consistencyhandler.(*ConsistencyHandler).waitForRV")
}

// TestReadYourWritesWaitEndsWithMember: a read waiting, with a ctx that has
// no deadline, for a write to reach the member's cache returns promptly
// when the member is deleted (ErrClusterNotFound) or restarts
// (ErrClusterNotReady).
func TestReadYourWritesWaitEndsWithMember(t *testing.T) {
	ns := testNamespace(t)
	informerKinds(t, func(t *testing.T, clientGo bool) {
		for _, c := range []struct {
			name  string
			leave func(*server.Server) error
			want  error
		}{
			{"deleted", func(srv *server.Server) error { return srv.Delete("m1") }, server.ErrClusterNotFound},
			{"restarted", func(srv *server.Server) error {
				nc := *fleet.Cluster("m1").Named
				nc.Config = rest.CopyConfig(nc.Config)
				nc.Config.Burst++ // a changed config: the member restarts
				return srv.Update(&nc)
			}, server.ErrClusterNotReady},
		} {
			t.Run(c.name, func(t *testing.T) {
				srv := consistentServer(t, ns, clientGo, true)
				key := outsideCache(t, srv, ns, fmt.Sprintf("leave-%v-%s", clientGo, c.name))
				done := make(chan error, 1)
				go func() {
					done <- srv.GetClient().Get(known.WithCluster(context.Background(), "m1"), key, &corev1.ConfigMap{})
				}()
				test.Eventually(t, 10*time.Second, "the Get waits for its write's resource version", waitingForResourceVersion)
				if err := c.leave(srv); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-done:
					if !errors.Is(err, c.want) {
						t.Errorf("Get: %v, want %v", err, c.want)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the Get still waits 10 s after the member left")
				}
			})
		}
	})
}

// TestReadYourWritesForbiddenKind: a member whose identity may create
// Secrets but not list them: a Get of a Secret it created is refused as
// Forbidden at once, as without read-your-writes, instead of waiting for a
// resource version the Secrets' informer can never see.
func TestReadYourWritesForbiddenKind(t *testing.T) {
	ns := testNamespace(t)
	ctx := context.Background()
	cfg := fleet.Cluster("m4").Config
	const sa = "create-secrets"
	tok, err := test.ServiceAccountToken(ctx, cfg, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	admin := adminClient(t, "m4")
	// ServiceAccountToken makes the account cluster-admin; take that back.
	if err := admin.Delete(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: test.AdminBindingName(ns, sa)}}); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
		}},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
		},
	} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	tc, err := client.New(test.TokenConfig(cfg, tok), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 15*time.Second, "the token may not list Secrets", func() bool {
		return apierrors.IsForbidden(tc.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)))
	})

	srv, err := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{
		Logger:                 test.Logger(t),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Client:                 client.Options{Cache: &client.CacheOptions{EnableReadYourWritesConsistency: ptr.To(true)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	test.Run(t, srv)
	if err := srv.Add(config.NewNamedConfig("m4", test.TokenConfig(cfg, tok))); err != nil {
		t.Fatal(err)
	}
	waitReady(t, srv, "m4")
	mctx, cancel := context.WithTimeout(known.WithCluster(ctx, "m4"), 20*time.Second)
	defer cancel()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "written", Namespace: ns}}
	if err := srv.GetClient().Create(mctx, secret); err != nil {
		t.Fatal(err)
	}
	if err := srv.GetClient().Get(mctx, client.ObjectKeyFromObject(secret), &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Fatalf("Get of a Secret the member may not list: %v, want Forbidden", err)
	}
}

// TestReadYourWritesOutsideTheScope: with read-your-writes on, a cached
// read outside a member's scope (config.Scope: Argo CD's "namespaces")
// fails at once with ErrOutOfScope, as it does without, also right after
// a write there, which the member's identity may make: it does not wait
// for a resource version that the member's caches, which leave that
// namespace out, never see.
func TestReadYourWritesOutsideTheScope(t *testing.T) {
	ns := testNamespace(t)
	outside := ns + "-out"
	fleet.CreateNamespace(t, outside)
	srv, err := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{
		Logger:                 test.Logger(t),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Client:                 client.Options{Cache: &client.CacheOptions{EnableReadYourWritesConsistency: ptr.To(true)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	test.Run(t, srv)
	scope, err := config.NewScope([]string{ns}, false)
	if err != nil {
		t.Fatal(err)
	}
	nc := config.NewNamedConfig("m1", fleet.Cluster("m1").Config)
	nc.Scope = scope
	if err := srv.Add(nc); err != nil {
		t.Fatal(err)
	}
	waitReady(t, srv, "m1")
	c := srv.GetClient()
	ctx, cancel := context.WithTimeout(known.WithCluster(context.Background(), "m1"), 20*time.Second)
	defer cancel()
	// The kind's informer runs (in ns) and has seen every write so far.
	in := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "in-scope", Namespace: ns}}
	if err := c.Create(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(in), &corev1.ConfigMap{}); err != nil {
		t.Fatalf("Get in the scope after Create: %v", err)
	}

	out := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "out-of-scope", Namespace: outside}}
	if err := c.Create(ctx, out); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	err = c.Get(ctx, client.ObjectKeyFromObject(out), &corev1.ConfigMap{})
	if took := time.Since(begin); !errors.Is(err, server.ErrOutOfScope) || took > 5*time.Second {
		t.Errorf("Get outside the scope after Create = %v after %s, want ErrOutOfScope at once", err, took.Round(time.Millisecond))
	}
	begin = time.Now()
	err = c.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(outside))
	if took := time.Since(begin); !errors.Is(err, server.ErrOutOfScope) || took > 5*time.Second {
		t.Errorf("List outside the scope after Create = %v after %s, want ErrOutOfScope at once", err, took.Round(time.Millisecond))
	}
}
