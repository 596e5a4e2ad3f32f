package fleetsource

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"sigs.k8s.io/controller-runtime/pkg/manager"
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
	// The free subscriber keeps up or is told the latest state: b's
	// states come in their order, none twice, and end with b leaving.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		last := ""
		if len(got) > 0 {
			last = got[len(got)-1]
		}
		mu.Unlock()
		if last == "b//true" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the free subscriber was not told b left behind a stuck one (last told %q)", last)
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	if got[0] != "a/Ready/false" {
		t.Errorf("first state %q, want the member there at subscription (and none that left before)", got[0])
	}
	prev := -1
	for _, st := range got[1 : len(got)-1] {
		var i int
		if _, err := fmt.Sscanf(st, "b/%d/false", &i); err != nil || i <= prev {
			t.Fatalf("told %q after b/%d: want b's states in order, none twice", st, prev)
		}
		prev = i
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

// A subscriber stuck in its function holds at most one state per member:
// each member's states not yet handed to it are replaced by the latest,
// and nothing a replaced state referred to (a Manager the member has
// since replaced) is kept for it. Once it goes on, it is told each
// member's latest state, once.
func TestFeedKeepsTheLatestStateForAStuckSubscriber(t *testing.T) {
	var f Feed
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stuck, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	told := map[string][]string{}
	f.Subscribe(ctx, func(m Member) {
		once.Do(func() { close(stuck) })
		<-release
		mu.Lock()
		told[m.Name] = append(told[m.Name], m.Phase)
		mu.Unlock()
	}, nil)
	f.Publish(Member{Name: "first", Phase: "Ready"})
	<-stuck // the subscriber holds "first" and waits

	// Each state carries a stand-in for a Manager; those replaced must be
	// collectable while the subscriber is stuck.
	var freed atomic.Int64
	const members, states = 10, 1000
	for i := range states {
		for j := range members {
			mgr := &[1 << 10]byte{}
			runtime.AddCleanup(mgr, func(*atomic.Int64) { freed.Add(1) }, &freed)
			f.Publish(Member{Name: fmt.Sprint("m", j), Phase: fmt.Sprint(i), Mgr: managerStandIn{held: mgr}})
		}
	}
	var s *subscription
	f.mu.Lock()
	for sub := range f.subs {
		s = sub
	}
	f.mu.Unlock()
	s.mu.Lock()
	queued := len(s.queue)
	s.mu.Unlock()
	if queued != members {
		t.Errorf("a stuck subscriber's queue holds %d states of %d members", queued, members)
	}
	want := int64(members*states - members)
	deadline := time.Now().Add(10 * time.Second)
	for freed.Load() < want && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := freed.Load(); got < want {
		t.Errorf("%d of %d replaced Managers collected while a subscriber was stuck", got, want)
	}

	close(release)
	deadline = time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(told)
		mu.Unlock()
		if n == members+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("told of %d members, want %d", n, members+1)
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for j := range members {
		name := fmt.Sprint("m", j)
		if got := told[name]; len(got) != 1 || got[0] != fmt.Sprint(states-1) {
			t.Errorf("%s told %v, want its latest state once", name, got)
		}
	}
}

// A subscriber is not told at start of the members another replica runs
// (it has nothing of theirs), only of those it is told move here later.
func TestFeedLeavesMembersElsewhereOutAtStart(t *testing.T) {
	var f Feed
	f.Publish(Member{Name: "here", Phase: "Ready"})
	f.Publish(Member{Name: "away", Phase: "Elsewhere", Away: true})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	names := make(chan string, 10)
	f.Subscribe(ctx, func(m Member) { names <- m.Name }, nil)
	if name := <-names; name != "here" {
		t.Errorf("told of %q at start, want here", name)
	}
	f.Publish(Member{Name: "away", Phase: "Ready"})
	if name := <-names; name != "away" {
		t.Errorf("told of %q, want away, now run here", name)
	}
	f.Publish(Member{Name: "away", Phase: "Elsewhere", Away: true})
	if name := <-names; name != "away" {
		t.Errorf("told of %q, want away, gone elsewhere again", name)
	}
}

// managerStandIn is a Manager for the feed, which only carries it: held
// is what a test watches being collected.
type managerStandIn struct {
	manager.Manager
	held *[1 << 10]byte
}
