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

// SetStartGateCPUBusy makes the start gates of Servers created from now
// until the test ends take busy's word for whether goroutines wait for a
// CPU, instead of the scheduler's: a test of what a slow check does gets
// the same answer however loaded the machine running it is.
func SetStartGateCPUBusy(t testing.TB, busy func() bool) {
	old := cpuBusy
	cpuBusy = busy
	t.Cleanup(func() { cpuBusy = old })
}
