package test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// stopBound bounds how long the stop function of Run and Background waits
// for Start to return.
const stopBound = time.Minute

// Run starts r (a server.Server, a ctrl.Manager, anything with
// Start(ctx) error) in the background for the rest of the test, and stops
// it when the test ends, failing the test if it does not stop cleanly. A
// Server left running leaks its goroutines and connections into the next
// test; a Start that hangs on the way out is a bug a test should report.
//
// The returned stop cancels Start's context and waits, at most a minute,
// for Start to return; it returns Start's error. Call it to stop r earlier,
// for example before checking what r left behind. It is safe to call more
// than once: later calls return the first call's result.
func Run(tb testing.TB, r manager.Runnable) (stop func() error) {
	tb.Helper()
	stop = Background(r)
	tb.Cleanup(func() {
		if err := stop(); err != nil {
			tb.Errorf("stopping %T: %v", r, err)
		}
	})
	return stop
}

// Background is Run without a test: for something that outlives any single
// test, like a Server shared by a whole package and stopped from TestMain,
// or for a plain program. The caller must call stop.
func Background(r manager.Runnable) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(stopBound):
				err = fmt.Errorf("test: %T did not stop within %s", r, stopBound)
			}
		})
		return err
	}
}
