package test

import (
	"testing"
	"time"
)

// pollInterval is how often Eventually checks its condition: often enough
// that a wait ends soon after the condition holds, seldom enough that a
// condition reading an API server does not load it.
const pollInterval = 20 * time.Millisecond

// Eventually waits until cond holds, and fails tb if it does not within the
// given time. Controllers, informers and API servers settle asynchronously,
// so a test asserts what must happen by a deadline rather than sleeping and
// hoping; what names the expectation in the failure message.
//
// cond runs on the test's goroutine, so it may itself call tb.Fatal.
func Eventually(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(pollInterval)
	}
}
