package test

import (
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// Logger returns a logger that writes to tb's log until tb's cleanup runs,
// and drops lines after that. controller-runtime's Manager logs from a
// goroutine of its stop sequence that may outlive Start, and a testing.T
// written to after its test completed panics; a logger built on tb alone
// (testr) turns that harmless late line into a failure of whichever test
// runs then.
func Logger(tb testing.TB) logr.Logger {
	var (
		mu   sync.Mutex
		done bool
	)
	tb.Cleanup(func() {
		mu.Lock()
		done = true
		mu.Unlock()
	})
	return funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return
		}
		if prefix != "" {
			tb.Log(prefix + ": " + args)
			return
		}
		tb.Log(args)
	}, funcr.Options{})
}
