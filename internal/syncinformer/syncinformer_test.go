package syncinformer

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// owner says so, and only then.
func TestSettled(t *testing.T) {
	settled := make(chan struct{})
	inf := Settled(settled)(fcache.NewFakeControllerSource(), &corev1.Pod{}, 0, toolscache.Indexers{})
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
	if !closed(inf.HasSyncedChecker().Done()) || !closed(reg.HasSyncedChecker().Done()) {
		t.Fatal("checker not done after settled")
	}
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
