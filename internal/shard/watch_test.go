package shard

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/mccr-dev/mccr/internal/leakcheck"
)

func groupLease(name, holder string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
	setMeta(l, "fleet", RoleReplica, "w")
	return l
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWatcher: the watcher lists, follows changes, lists again at once when
// its watch ends or when told to, and retries quietly while the API server
// refuses.
func TestWatcher(t *testing.T) {
	defer leakcheck.VerifyNone(t, goleak.IgnoreCurrent())
	s := newStore("ns")
	s.put(groupLease("one", "a"))
	lines := &lineCounter{}
	f := &fakeLeases{s: s}
	c := newCache(clock.RealClock{}, "fleet", time.Second, 2*time.Second, nil)
	w := newWatcher(f, "fleet", c, clock.RealClock{}, 50*time.Millisecond, time.Second, lines.logger(t, "w"))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { w.run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	has := func(name, holder string) func() bool {
		return func() bool { e, ok := c.get(name); return ok && !e.gone && e.rec.holder == holder }
	}
	eventually(t, "listed", has("one", "a"))
	s.put(groupLease("two", "b"))
	eventually(t, "watched", has("two", "b"))

	// Counted before the break: the list that follows it may come at once.
	lists := f.count("list")
	s.breakWatches()
	s.put(groupLease("three", "c"))
	eventually(t, "listed again after the watch broke", has("three", "c"))
	if f.count("list") == lists {
		t.Error("no list after the watch broke")
	}

	f.setFault(func(verb, _ string) fault { return refuse })
	lists = f.count("list")
	s.breakWatches()
	eventually(t, "several lists refused", func() bool { return f.count("list") >= lists+5 })
	f.setFault(nil)
	s.put(groupLease("four", "d"))
	eventually(t, "back after refusals", has("four", "d"))
	if n := lines.count("cannot list or watch"); n != 1 {
		t.Errorf("%d lines about failing lists over several failures, want 1", n)
	}
	eventually(t, "a line on recovery", func() bool { return lines.count("watching the Leases again") == 1 })

	watches := f.count("watch")
	w.restart()
	eventually(t, "a new watch after restart", func() bool { return f.count("watch") > watches })
}

// recMembers records Own and Disown of a real-time Coordinator.
type recMembers struct {
	mu      sync.Mutex
	names   []string
	running map[string]bool
	log     []string
}

func (m *recMembers) Names() []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Member, 0, len(m.names))
	for _, n := range m.names {
		out = append(out, Member{Name: n})
	}
	return out
}
func (m *recMembers) Own(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.running[name] = true
	m.log = append(m.log, "own "+name)
}
func (m *recMembers) Disown(name, _ string) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running[name] {
		m.log = append(m.log, "disown "+name)
	}
	delete(m.running, name)
	return closed
}
func (m *recMembers) StopAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.running)
}
func (m *recMembers) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.running)
}

// TestStartAndLeave runs a Coordinator for real: it joins, runs its
// clusters, and on the way out releases them and deletes its Lease, with
// no goroutine left behind.
func TestStartAndLeave(t *testing.T) {
	defer leakcheck.VerifyNone(t, goleak.IgnoreCurrent())
	s := newStore("ns")
	m := &recMembers{names: []string{"c1", "c2", "c3"}, running: map[string]bool{}}
	co := New(&fakeLeases{s: s}, m, Options{
		Identity: "a", Namespace: "ns", Group: "fleet",
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
		Logger: (&lineCounter{}).logger(t, "a"),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- co.Start(ctx) }()
	eventually(t, "all clusters run", func() bool { return m.count() == 3 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return")
	}
	if m.count() != 0 {
		t.Errorf("%d clusters still run after Start returned", m.count())
	}
	for _, l := range s.list() {
		if l.Labels[RoleLabel] == RoleReplica {
			t.Errorf("replica Lease %s left behind", l.Name)
		}
		if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "" {
			t.Errorf("cluster Lease %s still held by %q", l.Name, h)
		}
	}
}
