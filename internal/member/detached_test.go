package member

import (
	"context"
	"fmt"
	"maps"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/test"
)

// kindCase is a kind a member watches in these tests, with an object of
// it that the API server accepts.
type kindCase struct {
	name string
	obj  func(ns, name string) client.Object
	list func() client.ObjectList
}

func om(ns, name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }

var podSpec = corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}}

// tenKinds are ten namespaced kinds an API server serves without
// controllers.
var tenKinds = []kindCase{
	{"ConfigMap", func(ns, n string) client.Object { return &corev1.ConfigMap{ObjectMeta: om(ns, n)} }, func() client.ObjectList { return &corev1.ConfigMapList{} }},
	{"Secret", func(ns, n string) client.Object { return &corev1.Secret{ObjectMeta: om(ns, n)} }, func() client.ObjectList { return &corev1.SecretList{} }},
	{"ServiceAccount", func(ns, n string) client.Object { return &corev1.ServiceAccount{ObjectMeta: om(ns, n)} }, func() client.ObjectList { return &corev1.ServiceAccountList{} }},
	{"Service", func(ns, n string) client.Object {
		return &corev1.Service{ObjectMeta: om(ns, n), Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	}, func() client.ObjectList { return &corev1.ServiceList{} }},
	{"Pod", func(ns, n string) client.Object { return &corev1.Pod{ObjectMeta: om(ns, n), Spec: podSpec} }, func() client.ObjectList { return &corev1.PodList{} }},
	{"PersistentVolumeClaim", func(ns, n string) client.Object {
		return &corev1.PersistentVolumeClaim{ObjectMeta: om(ns, n), Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}}
	}, func() client.ObjectList { return &corev1.PersistentVolumeClaimList{} }},
	{"LimitRange", func(ns, n string) client.Object {
		return &corev1.LimitRange{ObjectMeta: om(ns, n), Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
			Type: corev1.LimitTypeContainer, Default: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
		}}}}
	}, func() client.ObjectList { return &corev1.LimitRangeList{} }},
	{"ResourceQuota", func(ns, n string) client.Object {
		return &corev1.ResourceQuota{ObjectMeta: om(ns, n), Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("100")}}}
	}, func() client.ObjectList { return &corev1.ResourceQuotaList{} }},
	{"Lease", func(ns, n string) client.Object {
		return &coordinationv1.Lease{ObjectMeta: om(ns, n), Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("x")}}
	}, func() client.ObjectList { return &coordinationv1.LeaseList{} }},
	{"Deployment", func(ns, n string) client.Object {
		labels := map[string]string{"app": n}
		return &appsv1.Deployment{ObjectMeta: om(ns, n), Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec},
		}}
	}, func() client.ObjectList { return &appsv1.DeploymentList{} }},
}

// versions maps the names of the objects of list in ns to their
// resource versions, as read by r.
func versions(ctx context.Context, r client.Reader, list client.ObjectList, ns string) (map[string]string, error) {
	if err := r.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, item := range items {
		m, err := meta.Accessor(item)
		if err != nil {
			return nil, err
		}
		out[m.GetName()] = m.GetResourceVersion()
	}
	return out, nil
}

// follower is a handler that rebuilds the objects of one namespace from
// its events.
type follower struct {
	ns    string
	mu    sync.Mutex
	state map[string]string // name → resource version
}

func newFollower(ns string) *follower { return &follower{ns: ns, state: map[string]string{}} }

func (f *follower) set(obj any, gone bool) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil || m.GetNamespace() != f.ns {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if gone {
		delete(f.state, m.GetName())
	} else {
		f.state[m.GetName()] = m.GetResourceVersion()
	}
}

func (f *follower) OnAdd(obj any, _ bool) { f.set(obj, false) }
func (f *follower) OnUpdate(_, obj any)   { f.set(obj, false) }
func (f *follower) OnDelete(obj any)      { f.set(obj, true) }
func (f *follower) snapshot() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.state)
}

// TestTenKindsSurviveAPIServerRestart: a member's cache watching ten
// kinds of a real API server (its informers detached, on shared pumps)
// syncs, follows creates, updates and deletes of each, and, once the API
// server has been stopped and started again, follows the changes made
// after the restart: the cache and the handlers end with what a direct
// List reads.
func TestTenKindsSurviveAPIServerRestart(t *testing.T) {
	f, err := test.Start(test.Options{}, "restart")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Error(err)
		}
	})
	cl := f.Cluster("restart")
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		// The kit's wait for the restarted process, and the connection its
		// readiness probe left in client-go's transport cache (the
		// member's and the test's own connections are closed by then:
		// onAPIServer tracks them).
		if rt, err := rest.TransportFor(cl.Config); err == nil {
			utilnet.CloseIdleConnectionsFor(rt)
		}
		leakcheck.VerifyNone(t, ignore,
			goleak.IgnoreAnyFunction("github.com/mccr-dev/mccr/test.(*Cluster).StartAPIServer.func1"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
	})
	cfg, admin := onAPIServer(t, cl)
	ctx := t.Context()
	const ns = "restart"
	if err := admin.Create(ctx, namespace(ns)); err != nil {
		t.Fatal(err)
	}

	m := buildOn(t, cfg, BuildOptions{})
	r := run(t, m)
	followers := make([]*follower, len(tenKinds))
	for k, kc := range tenKinds {
		inf, err := m.GetCache().GetInformer(syncCtx(t), kc.obj(ns, "x"))
		if err != nil {
			t.Fatalf("%s: %v", kc.name, err)
		}
		followers[k] = newFollower(ns)
		if _, err := inf.AddEventHandler(followers[k]); err != nil {
			t.Fatal(err)
		}
	}

	// change makes round n of changes to every kind: creates two objects,
	// updates one made before and deletes another.
	change := func(n int) {
		t.Helper()
		for _, kc := range tenKinds {
			for _, name := range []string{fmt.Sprintf("a%d", n), fmt.Sprintf("b%d", n)} {
				if err := admin.Create(ctx, kc.obj(ns, name)); err != nil {
					t.Fatalf("creating %s %s: %v", kc.name, name, err)
				}
			}
			if n == 0 {
				continue
			}
			patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{"round":"%d"}}}`, n))
			if err := admin.Patch(ctx, kc.obj(ns, fmt.Sprintf("a%d", n-1)), patch); err != nil {
				t.Fatalf("updating %s: %v", kc.name, err)
			}
			if err := admin.Delete(ctx, kc.obj(ns, fmt.Sprintf("b%d", n-1)), client.GracePeriodSeconds(0)); err != nil {
				t.Fatalf("deleting %s: %v", kc.name, err)
			}
		}
	}
	// converged waits for the cache and each kind's handler to hold what
	// a direct List reads.
	converged := func(within time.Duration, when string) {
		t.Helper()
		deadline := time.Now().Add(within)
		for k, kc := range tenKinds {
			for {
				want, err := versions(ctx, admin, kc.list(), ns)
				if err != nil {
					t.Fatal(err)
				}
				got, err := versions(ctx, m.GetCache(), kc.list(), ns)
				if err == nil && maps.Equal(got, want) && maps.Equal(followers[k].snapshot(), want) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: %s, the cache holds %v (%v) and the handler %v; the API server %v", kc.name, when, got, err, followers[k].snapshot(), want)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}

	change(0)
	change(1)
	converged(10*time.Second, "after creates, updates and deletes")

	if err := cl.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := cl.StartAPIServer(startCtx); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 30*time.Second, "the API server to answer again", func() bool {
		return admin.List(ctx, &corev1.NamespaceList{}) == nil
	})
	change(2)
	change(3)
	converged(60*time.Second, "after the API server restarted")
	if err := r.stop(t); err != nil {
		t.Errorf("Start = %v", err)
	}
}

// TestGoroutinesPerKind counts what a member with one controller costs
// in goroutines while idle, at one kind and at ten: the informers run
// detached, so an extra kind costs its watch (the HTTP/2 stream and
// client-go's decoder), two goroutines.
func TestGoroutinesPerKind(t *testing.T) {
	cl := apiServer(t)
	leakcheck.Cleanup(t)
	cfg, admin := onAPIServer(t, cl)
	ctx := t.Context()
	const ns = "goroutines" // there already when run with -count
	if err := admin.Create(ctx, namespace(ns)); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, kc := range tenKinds {
		if err := admin.Create(ctx, kc.obj(ns, "x")); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	// stable waits for the number of goroutines to stay the same for a
	// while, and returns it.
	stable := func() int {
		t.Helper()
		n, since := goruntime.NumGoroutine(), time.Now()
		deadline := since.Add(20 * time.Second)
		for time.Since(since) < time.Second {
			if time.Now().After(deadline) {
				t.Fatal("the number of goroutines did not settle within 20s")
			}
			time.Sleep(50 * time.Millisecond)
			if now := goruntime.NumGoroutine(); now != n {
				n, since = now, time.Now()
			}
		}
		return n
	}

	before := stable()
	m := buildOn(t, cfg, BuildOptions{Options: Options{Controller: crconfig.Controller{SkipNameValidation: ptr.To(true)}}})
	reconciled := make(chan struct{}, 1)
	if err := ctrl.NewControllerManagedBy(m).Named("goroutines").For(&corev1.ConfigMap{}).
		Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
			select {
			case reconciled <- struct{}{}:
			default:
			}
			return reconcile.Result{}, nil
		})); err != nil {
		t.Fatal(err)
	}
	r := run(t, m)
	if !m.WaitForSync(syncCtx(t)) {
		t.Fatal("WaitForSync = false")
	}
	<-reconciled
	one := stable() - before
	// None of the goroutines is an informer's: no run, no merge of stop
	// channels (controller-runtime's), no reflector; only its pump, which
	// the informers of the process share.
	// The watch's stream is read by the informer (its reader waits for
	// the next event), not by client-go's decoder.
	pumps := 0
	for _, g := range goroutineStacks() {
		switch {
		case strings.Contains(g, "leaninformer.(*pump).loop"):
			pumps++
		case strings.Contains(g, "leaninformer.(*streamWatch).receive"):
		case strings.Contains(g, "leaninformer.") || strings.Contains(g, "syncs.MergeChans") || strings.Contains(g, "cache.(*Reflector)") ||
			strings.Contains(g, "watch.(*StreamWatcher).receive"):
			t.Errorf("a goroutine of the informer runs:\n%s", g)
		}
	}
	for _, kc := range tenKinds[1:] {
		if _, err := m.GetCache().GetInformer(syncCtx(t), kc.obj(ns, "x")); err != nil {
			t.Fatalf("%s: %v", kc.name, err)
		}
	}
	ten := stable() - before
	perKind := float64(ten-one) / float64(len(tenKinds)-1)
	t.Logf("a member with one controller: %d goroutines at one kind (%d of them pumps, which a fleet shares), %d at ten: %.2f per extra kind",
		one, pumps, ten, perKind)
	if perKind > 2 {
		t.Errorf("%.2f goroutines per extra kind, want at most 2", perKind)
	}
	// The member's two (its Manager's, its cache's), the controller's
	// eight (Start, one worker, the wait for its sources' end,
	// controller-runtime's priority queue's five) and the watch's three
	// (the HTTP/2 connection's read loop, the stream's, the informer's
	// reader of the stream).
	if own := one - pumps; own > 13 {
		t.Errorf("%d goroutines at one kind besides the pumps, want at most 13", own)
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Start = %v", err)
	}
}

// goroutineStacks returns the stack of every goroutine.
func goroutineStacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := goruntime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}
