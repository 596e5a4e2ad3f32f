//go:build linux

package test

import (
	"syscall"
	"time"
	"unsafe"
)

// ThreadCPUTime is the CPU time of the calling thread so far
// (CLOCK_THREAD_CPUTIME_ID: to the nanosecond, where the thread's rusage
// counts in scheduler ticks); zero if the clock cannot be read. Benchmarks
// lock their goroutine to its thread (runtime.LockOSThread) around what
// they time with it.
func ThreadCPUTime() time.Duration {
	const clockThreadCPUTimeID = 3
	var ts syscall.Timespec
	_, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0) //nolint:gosec // G103: the system call writes its answer through a pointer
	if errno != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}
