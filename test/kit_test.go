package test_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kubefedv1beta1 "github.com/mccr-dev/mccr/apis/kubefed/v1beta1"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/test"
)

func TestAdminClientIsSharedUntilConnectionsAreClosed(t *testing.T) {
	ctx := t.Context()
	c := fleet.Cluster("one")
	a := c.AdminClient(t)
	if b := c.AdminClient(t); b != a {
		t.Fatal("AdminClient returned a second client before CloseConnections")
	}
	key := client.ObjectKey{Name: "default"}
	if err := a.Get(ctx, key, &corev1.Namespace{}); err != nil {
		t.Fatal(err)
	}
	fleet.CloseConnections()
	if err := a.Get(ctx, key, &corev1.Namespace{}); err == nil {
		t.Fatal("the admin client still reaches the API server after CloseConnections")
	}
	fresh := c.AdminClient(t)
	if fresh == a {
		t.Fatal("AdminClient returned the closed client")
	}
	if err := fresh.Get(ctx, key, &corev1.Namespace{}); err != nil {
		t.Fatalf("new admin client: %v", err)
	}
}

func TestCreateNamespaceInEveryCluster(t *testing.T) {
	ns := test.NamespaceName(t)
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		t.Fatalf("NamespaceName = %q: %v", ns, errs)
	}
	if !strings.HasPrefix(ns, "testcreatenamespaceineverycluster-") {
		t.Errorf("NamespaceName = %q, want it to start with the test's name", ns)
	}
	if again := test.NamespaceName(t); again == ns {
		t.Errorf("NamespaceName returned %q twice", ns)
	}
	fleet.CreateNamespace(t, ns)
	fleet.CreateNamespace(t, ns) // already there: no error
	for _, c := range fleet.Clusters {
		if err := c.AdminClient(t).Get(t.Context(), client.ObjectKey{Name: ns}, &corev1.Namespace{}); err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
	}
}

func TestNamespaceNameOfAnOddTestName(t *testing.T) {
	t.Run("__/Ünïcode & spaces, and a name far longer than any namespace may be", func(t *testing.T) {
		ns := test.NamespaceName(t)
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			t.Fatalf("NamespaceName = %q: %v", ns, errs)
		}
	})
}

// runnable returns err once its context ends, and counts its starts.
type runnable struct {
	starts atomic.Int32
	err    error
}

func (r *runnable) Start(ctx context.Context) error {
	r.starts.Add(1)
	<-ctx.Done()
	return r.err
}

func TestBackgroundStopsOnceWithStartsError(t *testing.T) {
	want := errors.New("stopped badly")
	r := &runnable{err: want}
	stop := test.Background(r)
	test.Eventually(t, 10*time.Second, "Start called", func() bool { return r.starts.Load() == 1 })
	if err := stop(); !errors.Is(err, want) {
		t.Fatalf("stop() = %v, want %v", err, want)
	}
	if err := stop(); !errors.Is(err, want) {
		t.Fatalf("second stop() = %v, want the first one's %v", err, want)
	}
	if n := r.starts.Load(); n != 1 {
		t.Errorf("Start called %d times", n)
	}
}

func TestRunStopsWhenTheTestEnds(t *testing.T) {
	r := &runnable{}
	var stop func() error
	t.Run("inner", func(t *testing.T) { stop = test.Run(t, r) })
	// The inner test's cleanup stopped it: stop returns at once.
	done := make(chan error, 1)
	go func() { done <- stop() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not stopped when its test ended")
	}
}

func TestJoinKubeFedRotateUnjoin(t *testing.T) {
	ctx := t.Context()
	host, member := fleet.Cluster("one"), fleet.Cluster("two")
	const ns, name = "kubefed-join", "two"
	tok, err := test.ServiceAccountToken(ctx, member.Config, ns, "joined")
	if err != nil {
		t.Fatal(err)
	}
	j, err := test.JoinKubeFed(ctx, host.Config, ns, name, member.Config, tok)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, kubefedv1beta1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	hc, err := host.Client(client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	var kfc kubefedv1beta1.KubeFedCluster
	if err := hc.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &kfc); err != nil {
		t.Fatal(err)
	}
	if kfc.Spec.APIEndpoint != member.Config.Host || string(kfc.Spec.CABundle) != string(member.Config.CAData) || kfc.Spec.SecretRef.Name != j.Secret.Name {
		t.Errorf("KubeFedCluster spec = %+v, want the member's endpoint, CA and Secret %s", kfc.Spec, j.Secret.Name)
	}
	secret := func() *corev1.Secret {
		t.Helper()
		var s corev1.Secret
		if err := hc.Get(ctx, client.ObjectKeyFromObject(j.Secret), &s); err != nil {
			t.Fatal(err)
		}
		return &s
	}
	s := secret()
	if !strings.HasPrefix(s.Name, name+"-") || string(s.Data["token"]) != tok || string(s.Data["ca.crt"]) != string(member.Config.CAData) {
		t.Errorf("Secret %s does not hold the token and the member's CA", s.Name)
	}

	// A label set by the test survives the rotation.
	s.Labels = map[string]string{"kept": "yes"}
	if err := hc.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := j.RotateToken(ctx, "rotated"); err != nil {
		t.Fatal(err)
	}
	if s = secret(); string(s.Data["token"]) != "rotated" || s.Labels["kept"] != "yes" || len(s.Data["ca.crt"]) == 0 {
		t.Errorf("after RotateToken: token %q, labels %v, ca.crt %d bytes", s.Data["token"], s.Labels, len(s.Data["ca.crt"]))
	}

	if err := j.Unjoin(ctx); err != nil {
		t.Fatal(err)
	}
	if err := hc.Get(ctx, client.ObjectKeyFromObject(j.Secret), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("Secret after Unjoin: %v, want NotFound", err)
	}
	if err := hc.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &kubefedv1beta1.KubeFedCluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("KubeFedCluster after Unjoin: %v, want NotFound", err)
	}
	if err := j.Unjoin(ctx); err != nil {
		t.Errorf("second Unjoin: %v", err)
	}
	if err := test.DeleteServiceAccount(ctx, member.Config, ns, "joined"); err != nil {
		t.Error(err)
	}
}

func TestJoinKubeFedWithoutToken(t *testing.T) {
	ctx := t.Context()
	j, err := test.JoinKubeFed(ctx, fleet.Cluster("one").Config, "kubefed-no-token", "three", fleet.Cluster("three").Config, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := j.Unjoin(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if _, ok := j.Secret.Data["token"]; ok {
		t.Errorf("Secret of a join without a token has one: %q", j.Secret.Data["token"])
	}
}

func TestFirstReconcile(t *testing.T) {
	var f test.FirstReconcile
	seen := f.Seen("east") // asked before the cluster reconciled
	if _, err := f.Reconcile(known.WithCluster(context.Background(), "west"), reconcile.Request{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-seen:
		t.Fatal("east seen after a Reconcile in west")
	default:
	}
	for range 2 { // a second Reconcile must not close the channel again
		if _, err := f.Reconcile(known.WithCluster(context.Background(), "east"), reconcile.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []string{"east", "west"} {
		select {
		case <-f.Seen(c):
		default:
			t.Errorf("%s not seen after its Reconcile", c)
		}
	}
}
