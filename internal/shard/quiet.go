package shard

import (
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// summaryEvery is how often a run of failures is summed up while it lasts.
const summaryEvery = 30 * time.Second

// failures reports a run of errors of one kind without flooding the log: a
// line when the run begins, a summary with the count at most every
// summaryEvery while it lasts, and a line when it ends. A control plane
// that is down for minutes costs a few lines, not a few per second.
type failures struct {
	log   logr.Logger
	clock clock.PassiveClock
	// what the failure is ("cannot renew this replica's Lease"), and what
	// its end is ("renewing this replica's Lease again").
	what, recovered string

	since    time.Time // first failure of the current run; zero when none
	count    int       // failures in the current run
	reported time.Time // last line about the run
}

func newFailures(log logr.Logger, clk clock.PassiveClock, what, recovered string) *failures {
	return &failures{log: log, clock: clk, what: what, recovered: recovered}
}

// failed counts a failure, and logs it when a run begins or a summary is
// due.
func (f *failures) failed(err error, kv ...any) {
	now := f.clock.Now()
	f.count++
	switch {
	case f.since.IsZero():
		f.since, f.reported = now, now
		f.log.Error(err, f.what+"; retrying, and reporting at most every "+summaryEvery.String()+" while it lasts", kv...)
	case now.Sub(f.reported) >= summaryEvery:
		f.reported = now
		f.log.Error(err, f.what+" (still)", append(kv, "failures", f.count, "for", now.Sub(f.since).Round(time.Second).String())...)
	}
}

// ok ends a run of failures, if one was under way.
func (f *failures) ok(kv ...any) {
	if f.since.IsZero() {
		return
	}
	f.log.Info(f.recovered, append(kv, "failures", f.count, "after", f.clock.Since(f.since).Round(time.Millisecond).String())...)
	f.since, f.count = time.Time{}, 0
}

// failing reports whether a run of failures is under way.
func (f *failures) failing() bool { return !f.since.IsZero() }
