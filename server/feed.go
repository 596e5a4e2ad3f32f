package server

import (
	"context"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// memberState is a member as the fleet feed tells it: its phase and, while
// it runs (Ready or Unreachable), its Manager. left means it was deleted
// from the fleet.
type memberState struct {
	name  string
	phase Phase
	err   error
	mgr   manager.Manager
	left  bool
}

// fleetFeed tells its subscribers every change of a member's phase: first
// the state of every member when they subscribe, then each change, in order
// per member. Cluster records publish to it under their own lock; the
// feed's lock is a leaf, publishing never blocks, and subscribers run in
// goroutines of their own with no lock held, so a slow subscriber delays
// nothing but itself.
type fleetFeed struct {
	mu   sync.Mutex
	now  map[string]memberState
	subs map[*feedSub]struct{}
}

// feedSub is one subscriber's queue.
type feedSub struct {
	mu    sync.Mutex
	queue []memberState
	wake  chan struct{} // capacity 1: "the queue is not empty"
}

func (s *feedSub) push(st memberState) {
	s.mu.Lock()
	s.queue = append(s.queue, st)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *feedSub) take() []memberState {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue = nil
	return q
}

// publish records st as the member's state and queues it for every
// subscriber.
func (f *fleetFeed) publish(st memberState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st.left {
		delete(f.now, st.name)
	} else {
		if f.now == nil {
			f.now = map[string]memberState{}
		}
		f.now[st.name] = st
	}
	for s := range f.subs {
		s.push(st)
	}
}

// subscribe calls fn with the state of every member, then with each change,
// until ctx ends, and then end (if not nil). Both run in one goroutine of
// the subscription's own, one call at a time.
func (f *fleetFeed) subscribe(ctx context.Context, fn func(memberState), end func()) {
	s := &feedSub{wake: make(chan struct{}, 1)}
	f.mu.Lock()
	for _, st := range f.now {
		s.queue = append(s.queue, st)
	}
	if f.subs == nil {
		f.subs = map[*feedSub]struct{}{}
	}
	f.subs[s] = struct{}{}
	if len(s.queue) > 0 {
		s.wake <- struct{}{} // nobody else can have filled it yet
	}
	f.mu.Unlock()
	go func() {
		defer func() {
			f.mu.Lock()
			delete(f.subs, s)
			f.mu.Unlock()
			if end != nil {
				end()
			}
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
			}
			for _, st := range s.take() {
				if ctx.Err() != nil {
					return
				}
				fn(st)
			}
		}
	}()
}
