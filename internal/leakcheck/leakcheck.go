package leakcheck

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Patience is how long VerifyNone waits for goroutines to end.
const Patience = 15 * time.Second

// VerifyNone fails t if goroutines that opts do not ignore are still
// running after Patience; it returns as soon as none are.
func VerifyNone(t testing.TB, opts ...goleak.Option) {
	t.Helper()
	verifyWithin(t, Patience, opts...)
}

func verifyWithin(t testing.TB, patience time.Duration, opts ...goleak.Option) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for goleak.Find(opts...) != nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	goleak.VerifyNone(t, opts...)
}

// Cleanup checks, as t ends, that every goroutine started since this
// call has ended (see VerifyNone); opts ignore more. Call it first:
// cleanups run last registered first, so the check runs after every
// other cleanup (a Manager stopped, a server closed).
func Cleanup(t testing.TB, opts ...goleak.Option) {
	t.Helper()
	opts = append(opts, goleak.IgnoreCurrent())
	t.Cleanup(func() { VerifyNone(t, opts...) })
}
