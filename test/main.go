package test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Main runs a test package against one fleet shared by all its tests, the
// usual TestMain of a package that tests controllers on real API servers:
//
//	var fleet *test.Fleet
//
//	func TestMain(m *testing.M) {
//		test.Main(m, &fleet, test.Options{}, "host", "east", "west")
//	}
//
// It starts the fleet and stores it in *fleet, runs the tests, then runs
// the functions registered with AtExit (last registered first), stops the
// fleet, and exits with the tests' status (1 if an AtExit function or the
// fleet's stop fails). When the fleet cannot start (the binaries are
// missing, say), it prints why and exits with status 1.
//
// API servers are the expensive part of such tests (2–3 s to start, some
// 300 MiB each): a package starts its fleet once and gives each test its
// own names or namespaces (NamespaceName, Fleet.CreateNamespace,
// Fleet.Add for a cluster of its own).
//
// Main sets controller-runtime's logger to one that discards unless the
// package set one before: without a logger, controller-runtime warns in
// the middle of the output and keeps every logger it hands out in memory.
func Main(m *testing.M, fleet **Fleet, opts Options, names ...string) {
	if !loggerSet {
		ctrl.SetLogger(logr.Discard())
	}
	f, err := Start(opts, names...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*fleet = f
	code := m.Run()
	if err := runAtExit(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	if err := f.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// loggerSet is set by SetLogger.
var loggerSet bool

// SetLogger sets controller-runtime's logger for the package's tests; Main
// then leaves it as it is. Call it before Main.
func SetLogger(l logr.Logger) {
	loggerSet = true
	ctrl.SetLogger(l)
}

var atExit struct {
	sync.Mutex
	fns []func() error
}

// AtExit registers f to run after the package's tests and before Main stops
// the fleet: for what outlives every single test and uses the fleet, like
// a Server shared by the package and started with Background (pass its
// stop function).
func AtExit(f func() error) {
	atExit.Lock()
	defer atExit.Unlock()
	atExit.fns = append(atExit.fns, f)
}

func runAtExit() error {
	atExit.Lock()
	fns := atExit.fns
	atExit.fns = nil
	atExit.Unlock()
	var errs []error
	for _, f := range slices.Backward(fns) {
		if err := f(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("test: at exit: %w", errors.Join(errs...))
}
