package server

import (
	"testing"
	"time"
)

// SetStartSlotHold makes the slots of Servers created from now until the
// test ends last up to d, so that a test can hold one on purpose without
// its hold expiring.
func SetStartSlotHold(t testing.TB, d time.Duration) {
	old := startSlotHold
	startSlotHold = d
	t.Cleanup(func() { startSlotHold = old })
}

// StartSlots reports how many of s's start slots are held and how many
// starts wait for one (both 0 when MaxConcurrentStarts leaves the gate
// out).
func StartSlots(s *Server) (held, waiting int) {
	if s.env.opts.starts == nil {
		return 0, 0
	}
	return s.env.opts.starts.stats()
}
