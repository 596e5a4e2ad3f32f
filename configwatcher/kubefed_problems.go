package configwatcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
)

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

// watchError receives the failures of the cache's list and watch calls.
// Those that are part of normal operation are ignored; the others are
// reported, the same message at most once per kubeFedHostErrorInterval,
// since the cache retries on its own.
func (w *KubeFedWatcher) watchError(ctx context.Context, r *toolscache.Reflector, err error) {
	switch {
	case ctx.Err() != nil, w.ctx.Err() != nil,
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, context.Canceled),
		apierrors.IsResourceExpired(err), apierrors.IsGone(err):
		return
	}
	err = fmt.Errorf("configwatcher: KubeFed host %s: watching %s in namespace %s: %w", w.host, r.TypeDescription(), w.opts.Namespace, err)
	msg := err.Error()
	now := time.Now()
	w.hostErrsMu.Lock()
	for m, at := range w.hostErrs {
		if now.Sub(at) >= kubeFedHostErrorInterval {
			delete(w.hostErrs, m) // also keeps the map small
		}
	}
	if _, seen := w.hostErrs[msg]; seen {
		err = nil
	} else {
		w.hostErrs[msg] = now
	}
	w.hostErrsMu.Unlock()
	if err != nil {
		w.pub.report(err)
	}
}
