package watchertest

import (
	"sync"
	"time"

	"go.uber.org/goleak"
)

// snapshot remembers the goroutines running now, for noLeaks.
func snapshot() goleak.Option { return goleak.IgnoreCurrent() }

// stop calls Stop three times at once and once more, and fails the check
// if they do not all return within the harness's patience.
func (s *stream) stop(while string) {
	s.t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(s.w.Stop)
		}
		wg.Wait()
		s.w.Stop()
	}()
	select {
	case <-done:
	case <-time.After(s.h.Patience):
		s.stopHung = true
		s.t.Fatalf("%s: Stop did not return within %s", while, s.h.Patience)
	}
}

// closed checks, after Stop returned, that both channels are closed: what
// they still buffer may be read, then they must end. It returns how many
// errors were left on Errors.
func (s *stream) closed() int {
	s.t.Helper()
	deadline := time.After(s.h.Quiet)
	events, errs := s.w.Events(), s.w.Errors()
	if events == nil {
		s.t.Error("Events returned nil after Stop: it must be a closed channel")
	}
	n := 0
	for events != nil || errs != nil {
		select {
		case _, ok := <-events:
			if !ok {
				events = nil
			}
		case _, ok := <-errs:
			if !ok {
				errs = nil
			} else {
				n++
			}
		case <-deadline:
			if events != nil {
				s.t.Errorf("Events is still open %s after Stop returned: it must be closed once Stop returns", s.h.Quiet)
			}
			if errs != nil {
				s.t.Errorf("Errors is still open %s after Stop returned: it must be closed once Stop returns", s.h.Quiet)
			}
			return n
		}
	}
	return n
}

// noLeaks checks that no goroutine started since the snapshot is left,
// waiting the harness's patience for them to end.
func (s *stream) noLeaks(since goleak.Option) {
	s.t.Helper()
	opts := append([]goleak.Option{since}, s.h.LeakOptions...)
	deadline := time.Now().Add(s.h.Patience)
	for {
		err := goleak.Find(opts...)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Errorf("goroutines started with the watcher are still running %s after Stop returned:\n%v", s.h.Patience, err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitPending waits, for at most the harness's quiet time, until an event
// waits unread on a buffered Events channel, so that Stop comes while the
// watcher has something to deliver.
func (s *stream) waitPending() {
	deadline := time.Now().Add(s.h.Quiet)
	for len(s.w.Events()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}
