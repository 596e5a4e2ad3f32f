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
// every member in this replica's fleet when they subscribe (not those
// another replica runs: a subscriber has nothing of theirs to let go),
// then each change, in order per member. Cluster records publish to it
// under their own lock, so its lock is a leaf and Publish never blocks;
// subscribers run in goroutines of their own with no lock held, so a slow
// subscriber delays nothing but itself.
//
// A subscriber that falls behind is told each member's latest state: a
// state not yet handed to it is replaced by the member's next one, in its
// place in the queue. So a subscriber's queue holds at most one state per
// member, however long it blocks, and no Manager a member has since
// replaced is kept for it. The zero value is ready to use.
type Feed struct {
	mu   sync.Mutex
	now  map[string]Member
	subs map[*subscription]struct{}
}

// subscription is one subscriber's queue: at most one state per member,
// the latest (queued: where it is).
type subscription struct {
	mu     sync.Mutex
	queue  []Member
	queued map[string]int
	wake   chan struct{} // capacity 1: "the queue is not empty"
}

func (s *subscription) push(m Member) {
	s.mu.Lock()
	if i, ok := s.queued[m.Name]; ok {
		s.queue[i] = m
	} else {
		if s.queued == nil {
			s.queued = map[string]int{}
		}
		s.queued[m.Name] = len(s.queue)
		s.queue = append(s.queue, m)
	}
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
	clear(s.queued)
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

// Subscribe calls fn with the state of every member of this replica's
// fleet, then with each change (the latest, when fn falls behind), until
// ctx ends, and then end (if not nil). Both run in one
// goroutine of the subscription's own, one call at a time.
func (f *Feed) Subscribe(ctx context.Context, fn func(Member), end func()) {
	s := &subscription{wake: make(chan struct{}, 1)}
	f.mu.Lock()
	for _, m := range f.now {
		if !m.Away {
			s.push(m)
		}
	}
	if f.subs == nil {
		f.subs = map[*subscription]struct{}{}
	}
	f.subs[s] = struct{}{} // push has woken the goroutine if it queued any
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
