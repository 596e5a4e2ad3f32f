// Package schedwait tells whether this process's goroutines wait for a
// CPU: whether the process is CPU-bound, on its own or because the
// machine's other processes keep the cores busy.
//
// It reads the Go scheduler's own record of how long goroutines wait
// between becoming runnable and running (runtime/metrics
// "/sched/latencies:seconds"): a few microseconds while a core is free,
// milliseconds once every core is taken. A member start that has waited
// tens of milliseconds for its API server's answer waits on the network
// when goroutines get a CPU at once, and on the CPU when they do not; the
// server's start gate tells the two apart with it.
package schedwait
