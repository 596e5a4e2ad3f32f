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
