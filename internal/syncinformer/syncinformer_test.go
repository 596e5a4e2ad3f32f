package syncinformer

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"
)

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// An informer that never runs reports synced through its checkers once the
// owner ends it, and only then.
func TestWrapEnds(t *testing.T) {
	settled := make(chan struct{})
	inf := Wrap(settled, nil, nil)(fcache.NewFakeControllerSource(), &corev1.Pod{}, 0, toolscache.Indexers{})
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{})
	if err != nil {
		t.Fatal(err)
	}
	if closed(inf.HasSyncedChecker().Done()) || closed(reg.HasSyncedChecker().Done()) {
		t.Fatal("checker done before settled")
	}
	if inf.HasSynced() {
		t.Fatal("HasSynced must stay the informer's own")
	}
	close(settled)
	waitClosed(t, inf.HasSyncedChecker().Done(), reg.HasSyncedChecker().Done())
	if err := inf.RemoveEventHandler(reg); err != nil {
		t.Fatalf("removing a wrapped registration: %v", err)
	}
}

// Wait returns once the informer and every handler registered through
// the tracker have synced, and false when ctx ends first.
func TestTrackerWait(t *testing.T) {
	src := fcache.NewFakeControllerSource()
	src.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}})
	raw := toolscache.NewSharedIndexInformer(src, &corev1.Pod{}, 0, toolscache.Indexers{})
	var tr Tracker
	inf := tr.Track(raw)
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{}); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if tr.Wait(short) {
		t.Fatal("Wait returned true before the informer ran")
	}
	stop := make(chan struct{})
	defer close(stop)
	go raw.Run(stop)
	ctx, cancel2 := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel2()
	if !tr.Wait(ctx) {
		t.Fatal("Wait did not see the sync")
	}
	if !raw.HasSynced() {
		t.Fatal("Wait returned before the informer synced")
	}
}

// A forbidden kind counts as synced, checkers and HasSynced alike; a real
// sync takes it out of the set again.
func TestWrapForbiddenKind(t *testing.T) {
	ends := make(chan struct{})
	defer close(ends)
	kinds := NewKinds()
	src := fcache.NewFakeControllerSource()
	inf := Wrap(ends, nil, kinds)(src, &corev1.Pod{}, 0, toolscache.Indexers{})
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{})
	if err != nil {
		t.Fatal(err)
	}
	if inf.HasSynced() || reg.HasSynced() || closed(inf.HasSyncedChecker().Done()) {
		t.Fatal("synced before anything happened")
	}
	kinds.Forbid(KindOf(&corev1.Pod{}))
	waitClosed(t, inf.HasSyncedChecker().Done(), reg.HasSyncedChecker().Done())
	if !inf.HasSynced() || !reg.HasSynced() {
		t.Fatal("a forbidden kind does not count as synced")
	}
	stop := make(chan struct{})
	defer close(stop)
	go inf.Run(stop)
	deadline := time.Now().Add(10 * time.Second)
	for kinds.Has(KindOf(&corev1.Pod{})) {
		if time.Now().After(deadline) {
			t.Fatal("the kind stayed forbidden after the informer synced")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitClosed(t *testing.T, chs ...<-chan struct{}) {
	t.Helper()
	for _, c := range chs {
		select {
		case <-c:
		case <-time.After(5 * time.Second):
			t.Fatal("checker not done")
		}
	}
}

// KindOf names a kind as the reflector of its informer does, the key a
// forbidden kind is recorded under.
func TestKindOfMatchesReflectors(t *testing.T) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"})
	for _, obj := range []kruntime.Object{&corev1.Pod{}, u, &unstructured.Unstructured{}, &metav1.PartialObjectMetadata{}} {
		r := toolscache.NewReflector(fcache.NewFakeControllerSource(), obj, toolscache.NewStore(toolscache.MetaNamespaceKeyFunc), 0)
		if got, want := KindOf(obj), r.TypeDescription(); got != want {
			t.Errorf("KindOf(%T) = %q, the reflector's description is %q", obj, got, want)
		}
	}
}
