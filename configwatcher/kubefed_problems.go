package configwatcher

import "time"

// kubeFedProblem is a problem with one KubeFedCluster, held back until it
// has lasted ErrorDelay.
type kubeFedProblem struct {
	err      error
	since    time.Time
	reported bool
}

// reportProblems reports each problem once it has lasted ErrorDelay, and
// forgets the problems that are gone. It returns the earliest time a
// problem still held back is due, or zero.
func (w *KubeFedWatcher) reportProblems(now map[string]error, at time.Time) time.Time {
	var next time.Time
	for name := range w.problems {
		if now[name] == nil {
			delete(w.problems, name)
		}
	}
	for name, err := range now {
		p := w.problems[name]
		if p == nil || p.err.Error() != err.Error() {
			p = &kubeFedProblem{err: err, since: at}
			w.problems[name] = p
		}
		if p.reported {
			continue
		}
		due := p.since.Add(w.opts.ErrorDelay)
		if !at.Before(due) {
			w.pub.report(p.err)
			p.reported = true
			continue
		}
		if next.IsZero() || due.Before(next) {
			next = due
		}
	}
	return next
}
