package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	mcclient "github.com/mccr-dev/mccr/client"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
)

// PodReconciler is an ordinary controller-runtime reconciler. Its client is
// the Server's fan-out client; it needs nothing else to work in every
// cluster.
type PodReconciler struct {
	crclient.Client
}

func (r *PodReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// ctx names the cluster the request came from: this Get reads that
	// cluster's cache.
	var pod corev1.Pod
	if err := r.Get(ctx, req.NamespacedName, &pod); err != nil {
		return ctrl.Result{}, crclient.IgnoreNotFound(err)
	}

	// To write somewhere else, name the other cluster.
	cluster, _ := known.ClusterFrom(ctx)
	record := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "pod-records", Name: cluster + "." + pod.Name},
		Data:       map[string]string{"cluster": cluster, "node": pod.Spec.NodeName},
	}
	hub := known.WithCluster(ctx, "hub")
	if err := r.Create(hub, record); crclient.IgnoreAlreadyExists(err) != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// Calls go to the cluster named in their context. In Reconcile, mccr has
// named it already; elsewhere, name it with known.WithCluster.
func Example() {
	srv, err := server.NewServer(ctrl.GetConfigOrDie(), ctrl.Options{})
	if err != nil {
		panic(err)
	}
	c := srv.GetClient()
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).For(&corev1.Pod{}).Complete(&PodReconciler{Client: c})
	})

	// Outside a Reconcile: name the cluster yourself.
	ctx := known.WithCluster(context.Background(), "east")
	var cm corev1.ConfigMap
	err = c.Get(ctx, crclient.ObjectKey{Namespace: "default", Name: "settings"}, &cm)
	if errors.Is(err, mcclient.ErrClusterNotReady) {
		fmt.Println("east is not ready yet")
	}

	// Without a cluster, calls that need one fail.
	err = c.Get(context.Background(), crclient.ObjectKey{Namespace: "default", Name: "settings"}, &cm)
	fmt.Println(errors.Is(err, mcclient.ErrNoClusterInContext))
}

// clusters is a Fleet of fixed clients, handy in unit tests of
// multi-cluster code; a Server is the Fleet of real use.
type clusters map[string]crclient.Client

func (f clusters) Route(name string) (mcclient.Member, error) {
	c, ok := f[name]
	if !ok {
		return mcclient.Member{}, mcclient.NotFound(name)
	}
	return mcclient.Member{Name: name, Client: c}, nil
}

func (f clusters) Members() []mcclient.Member {
	out := make([]mcclient.Member, 0, len(f))
	for name, c := range f {
		out = append(out, mcclient.Member{Name: name, Client: c})
	}
	slices.SortFunc(out, func(a, b mcclient.Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func clusterWith(names ...string) crclient.Client {
	b := fake.NewClientBuilder()
	for _, n := range names {
		b = b.WithObjects(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: n}})
	}
	return b.Build()
}

// A List whose context names no cluster lists every cluster, and marks
// each item with the cluster it came from.
func ExampleClient_List() {
	c := mcclient.New(clusters{
		"east": clusterWith("settings", "east-only"),
		"west": clusterWith("settings"),
	}, mcclient.Options{Scheme: scheme.Scheme})

	var list corev1.ConfigMapList
	if err := c.List(context.Background(), &list, crclient.InNamespace("default")); err != nil {
		panic(err)
	}
	for _, cm := range list.Items {
		fmt.Println(cm.Annotations[known.ClusterAnnotation], cm.Name)
	}

	// Only some clusters:
	ctx := known.WithClusters(context.Background(), "west")
	if err := c.List(ctx, &list, crclient.InNamespace("default")); err != nil {
		panic(err)
	}
	fmt.Println(len(list.Items), "in west")

	// Route a follow-up call with the annotation; it is removed again
	// before the write.
	item := list.Items[0]
	item.Data = map[string]string{"seen": "yes"}
	if err := c.Update(known.WithCluster(context.Background(), item.Annotations[known.ClusterAnnotation]), &item); err != nil {
		panic(err)
	}
	_, marked := item.Annotations[known.ClusterAnnotation]
	fmt.Println("annotation written back:", marked)

	// Output:
	// east east-only
	// east settings
	// west settings
	// 1 in west
	// annotation written back: false
}

// By default a fleet-wide List with a cluster that cannot be read fails
// with a *ListError naming it. With a *Partial, it returns what the other
// clusters had, and names the missing ones in Partial.Failed.
func ExamplePartial() {
	down := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, crclient.WithWatch, crclient.ObjectList, ...crclient.ListOption) error {
			return errors.New("connection refused")
		},
	}).Build()
	c := mcclient.New(clusters{
		"east": clusterWith("settings"),
		"west": down,
	}, mcclient.Options{Scheme: scheme.Scheme})

	var list corev1.ConfigMapList
	err := c.List(context.Background(), &list)
	if _, ok := errors.AsType[*mcclient.ListError](err); ok {
		fmt.Println(err)
		fmt.Println(len(list.Items), "item(s) from the others")
	}

	var partial mcclient.Partial
	if err := c.List(context.Background(), &list, &partial); err != nil {
		panic(err)
	}
	fmt.Println(len(list.Items), "item(s); failed:", partial.Failed)

	// Output:
	// fleet-wide List failed in 1 of 2 clusters: cluster "west": connection refused
	// 1 item(s) from the others
	// 1 item(s); failed: map[west:connection refused]
}
