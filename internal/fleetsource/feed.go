package fleetsource

import (
	"context"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Member is a member as the feed tells it.
type Member struct {
	// Name is the member's cluster name.
	Name string
	// Phase is the member's phase, as the Server names it.
	Phase string
	// Err is why the member is in that phase, redacted, if any.
	Err error
	// Mgr is the member's Manager while it runs (Ready or Unreachable).
	Mgr manager.Manager
	// Left means the member was deleted from the fleet.
	Left bool
	// Away means, with sharding, that another replica runs the member now
	// (or will): this replica's sources see it no more unless it comes
	// back.
	Away bool
}

// Feed tells its subscribers every change of a member: first the state of
// every member when they subscribe, then each change, in order per
// member. Cluster records publish to it under their own lock, so its lock
// is a leaf and Publish never blocks; subscribers run in goroutines of
// their own with no lock held, so a slow subscriber delays nothing but
// itself. The zero value is ready to use.
type Feed struct {
	mu   sync.Mutex
	now  map[string]Member
	subs map[*subscription]struct{}
}

// subscription is one subscriber's queue.
type subscription struct {
	mu    sync.Mutex
	queue []Member
	wake  chan struct{} // capacity 1: "the queue is not empty"
}

func (s *subscription) push(m Member) {
	s.mu.Lock()
	s.queue = append(s.queue, m)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscription) take() []Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue = nil
	return q
}

// Publish records m as the member's state and queues it for every
// subscriber. Callers publish only once the state m announces is visible
// elsewhere (route, Status), since a subscriber may act on it at once.
func (f *Feed) Publish(m Member) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m.Left {
		delete(f.now, m.Name)
	} else {
		if f.now == nil {
			f.now = map[string]Member{}
		}
		f.now[m.Name] = m
	}
	for s := range f.subs {
		s.push(m)
	}
}

// Subscribe calls fn with the state of every member, then with each
// change, until ctx ends, and then end (if not nil). Both run in one
// goroutine of the subscription's own, one call at a time.
func (f *Feed) Subscribe(ctx context.Context, fn func(Member), end func()) {
	s := &subscription{wake: make(chan struct{}, 1)}
	f.mu.Lock()
	for _, m := range f.now {
		s.queue = append(s.queue, m)
	}
	if f.subs == nil {
		f.subs = map[*subscription]struct{}{}
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
			for _, m := range s.take() {
				if ctx.Err() != nil {
					return
				}
				fn(m)
			}
		}
	}()
}
