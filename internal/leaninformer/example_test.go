package leaninformer_test

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/mccr-dev/mccr/internal/leaninformer"
)

// An informer over a (fake) clientset. Each handler is handed its events
// in a goroutine of its own: a registration has synced once its handler
// has been handed the initial list (a handler added later, the objects in
// the store), which is what controller-runtime's sources wait for.
func Example() {
	client := fake.NewClientset(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "b"}},
	)
	lw := toolscache.ToListWatcherWithWatchListSemantics(&toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return client.CoreV1().ConfigMaps("default").List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return client.CoreV1().ConfigMaps("default").Watch(ctx, opts)
		},
	}, client)
	informer := leaninformer.New(lw, &corev1.ConfigMap{}, 0, toolscache.Indexers{})

	var mu sync.Mutex
	var seen []string
	record := func(who string) toolscache.ResourceEventHandler {
		return toolscache.ResourceEventHandlerDetailedFuncs{AddFunc: func(obj any, isInInitialList bool) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, fmt.Sprintf("%s: add %s (initial list: %v)", who, obj.(*corev1.ConfigMap).Name, isInInitialList))
		}}
	}
	first, err := informer.AddEventHandler(record("first"))
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go informer.RunWithContext(ctx)
	if !toolscache.WaitForCacheSync(ctx.Done(), first.HasSynced) {
		panic("not synced")
	}
	second, err := informer.AddEventHandler(record("second"))
	if err != nil {
		panic(err)
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), second.HasSynced) {
		panic("not synced")
	}

	mu.Lock()
	slices.Sort(seen)
	for _, s := range seen {
		fmt.Println(s)
	}
	mu.Unlock()
	fmt.Println("informer synced:", informer.HasSynced())
	// Output:
	// first: add a (initial list: true)
	// first: add b (initial list: true)
	// second: add a (initial list: true)
	// second: add b (initial list: true)
	// informer synced: true
}
