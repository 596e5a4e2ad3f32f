package shard

import (
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

const (
	// summaryEvery is how often a run of failures is summed up while it
	// lasts: at most one line about the run in that time.
	summaryEvery = 30 * time.Second
	// recoveredAfter is how long renewals and writes must have worked
	// before a run of their failures counts as over: a host that fails
	// every other call is one run, summed up, not a run and a recovery a
	// call.
	recoveredAfter = 10 * time.Second
	// quietStart is how long a run of failures that begins within
	// summaryEvery of the last line may last untold (its failures count
	// in the next line).
	quietStart = 5 * time.Second
)

// failures reports a run of errors of one kind without flooding the log: a
// line when the run begins, a summary with the count at most every
// summaryEvery while it lasts, and a line once calls have worked for
// settleAfter. A control plane that is down for minutes, or that fails
// every other call, costs a few lines, not a few per second. A run that
// begins within summaryEvery of the last line is told of once it has
// lasted quietStart; one shorter than that counts in the next line.
type failures struct {
	log   logr.Logger
	clock clock.PassiveClock
	// what the failure is ("cannot renew this replica's Lease"), and what
	// its end is ("renewing this replica's Lease again").
	what, recovered string
	settleAfter     time.Duration

	since    time.Time // first failure of the current run; zero when none
	count    int       // failures in the current run, and in runs no line told of
	reported time.Time // last line about a run
	logged   bool      // a line told of the current run
	okSince  time.Time // first success since the run's last failure
	kv       []any     // of that success, for the line that ends the run
}

func newFailures(log logr.Logger, clk clock.PassiveClock, settleAfter time.Duration, what, recovered string) *failures {
	return &failures{log: log, clock: clk, settleAfter: settleAfter, what: what, recovered: recovered}
}

// failed counts a failure, and logs it when a run begins or a summary is
// due.
func (f *failures) failed(err error, kv ...any) {
	now := f.clock.Now()
	f.count++
	f.okSince = time.Time{}
	if f.since.IsZero() {
		f.since = now
	}
	due := f.reported.IsZero() || now.Sub(f.reported) >= summaryEvery
	if !f.logged {
		// A run that begins soon after the last line is told of once it
		// has lasted quietStart: a blip is not, an outage is at once.
		if !due && now.Sub(f.since) < quietStart {
			return
		}
		f.reported, f.logged = now, true
		f.log.Error(err, f.what+"; retrying, and reporting at most every "+summaryEvery.String()+" while it lasts", append(kv, "failures", f.count)...)
		return
	}
	if due {
		f.reported = now
		f.log.Error(err, f.what+" (still)", append(kv, "failures", f.count, "for", now.Sub(f.since).Round(time.Second).String())...)
	}
}

// ok counts a success: the run of failures under way ends once calls have
// worked for settleAfter (settle).
func (f *failures) ok(kv ...any) {
	if f.since.IsZero() {
		return
	}
	if f.okSince.IsZero() {
		f.okSince, f.kv = f.clock.Now(), kv
	}
	f.settle()
}

// settle ends the run of failures under way if calls have worked for
// settleAfter since its last failure. Called by its owner now and then
// (ok calls it), so that a run ends even when no call follows.
func (f *failures) settle() {
	if f.okSince.IsZero() {
		return
	}
	now := f.clock.Now()
	if now.Sub(f.okSince) < f.settleAfter {
		return
	}
	if f.logged {
		f.reported = now
		f.log.Info(f.recovered, append(f.kv, "failures", f.count, "after", f.okSince.Sub(f.since).Round(time.Millisecond).String())...)
		f.count = 0
	}
	// A run no line told of keeps its count for the next line.
	f.since, f.okSince, f.kv, f.logged = time.Time{}, time.Time{}, nil, false
}

// failing reports whether the last call failed.
func (f *failures) failing() bool { return !f.since.IsZero() && f.okSince.IsZero() }
