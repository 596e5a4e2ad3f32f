//go:build !linux

package test

import (
	"fmt"
	"runtime"
	"syscall"
)

// Outside Linux there is no parent-death signal: the API servers of a
// fleet are started directly, and a test binary that is killed leaves them
// running. Fault injection (StopAPIServer) needs the shim's records.

func prepareShim(string, string) (string, error) { return "", nil }

func shimProcess(_, base string) (int, []string, error) {
	return 0, nil, fmt.Errorf("test: stopping and restarting %s is supported on Linux only (running on %s): %w", base, runtime.GOOS, ErrFaultInjectionUnsupported)
}

func dieWithParent() *syscall.SysProcAttr { return nil }
