//go:build !linux

package test

import "time"

// ThreadCPUTime is zero where the thread's CPU clock is not read.
func ThreadCPUTime() time.Duration { return 0 }
