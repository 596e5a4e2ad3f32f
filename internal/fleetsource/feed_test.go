package fleetsource

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestFeedTellsInOrderAndNeverBlocks: a subscriber gets the members there
// when it subscribed, then every change in order per member; a subscriber
// stuck in its function holds up neither Publish nor another subscriber;
// ending the subscription runs end and leaves no goroutine.
func TestFeedTellsInOrderAndNeverBlocks(t *testing.T) {
	var f Feed
	f.Publish(Member{Name: "a", Phase: "Ready"})
	f.Publish(Member{Name: "gone", Phase: "Ready"})
	f.Publish(Member{Name: "gone", Left: true})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stuck, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.Subscribe(ctx, func(Member) {
		once.Do(func() { close(stuck) })
		<-release
	}, nil)

	var mu sync.Mutex
	var got []string
	ended := make(chan struct{})
	f.Subscribe(ctx, func(m Member) {
		mu.Lock()
		got = append(got, fmt.Sprintf("%s/%s/%v", m.Name, m.Phase, m.Left))
		mu.Unlock()
	}, func() { close(ended) })

	<-stuck
	const n = 1000
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := range n {
			f.Publish(Member{Name: "b", Phase: fmt.Sprint(i)})
		}
		f.Publish(Member{Name: "b", Left: true})
	}()
	select {
	case <-published:
	case <-time.After(10 * time.Second):
		t.Fatal("Publish blocked behind a stuck subscriber")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		k := len(got)
		mu.Unlock()
		if k == n+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the free subscriber got %d of %d states behind a stuck one", k, n+2)
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	if got[0] != "a/Ready/false" {
		t.Errorf("first state %q, want the member there at subscription (and none that left before)", got[0])
	}
	for i := range n {
		if want := fmt.Sprintf("b/%d/false", i); got[i+1] != want {
			t.Fatalf("state %d is %q, want %q", i+1, got[i+1], want)
		}
	}
	if got[n+1] != "b//true" {
		t.Errorf("last state %q, want b left", got[n+1])
	}
	mu.Unlock()

	cancel()
	close(release)
	<-ended
	// A subscription after b left is not told of it.
	ctx2, cancel2 := context.WithCancel(context.Background())
	names := make(chan string, 10)
	f.Subscribe(ctx2, func(m Member) { names <- m.Name }, nil)
	if name := <-names; name != "a" {
		t.Errorf("a new subscriber was told of %q first, want a", name)
	}
	cancel2()
}
