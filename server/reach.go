package server

import (
	"errors"
	"time"

	"github.com/mccr-dev/mccr/internal/reach"
)

// A member's connection to its API server is watched by internal/reach:
// each attempt (start) of a member has a reach.Monitor, told every request
// and every failed list or watch of the member, which probes the API
// server while the member runs. reachObserver is how the Monitor reports to
// the attempt and to the cluster record.

// probesLeftOut is how many periodic probes in a row a member that
// answers may have left out while members wait to start (see
// Options.ReachProbeInterval).
const probesLeftOut = 3

// reachOptions are the Monitors' options, from the Server's.
func (e *env) reachOptions() reach.Options {
	o := reach.Options{
		CheckTimeout:   e.opts.ProbeTimeout,
		Interval:       e.opts.ReachProbeInterval,
		OutageInterval: e.opts.OutageProbeInterval,
		Timeout:        e.opts.ReachProbeTimeout,
		Limit:          e.opts.probes,
		RefreshGrace:   refreshGrace(e.opts),
	}
	if e.opts.starts != nil {
		// While the start bound holds members back, the cores are better
		// spent starting them than asking members that just answered
		// whether they still do.
		o.Busy, o.MaxLeftOut = e.opts.starts.backlogged, probesLeftOut
	}
	return o
}

// refreshGrace is how long a running member's credentials may stay
// refused before it fails: one ReachProbeInterval (one more periodic probe
// than the one that found them refused), at least OutageProbeInterval.
// Time for a rotation that revoked the old credentials first to deliver
// the new ones (an Update, an exec plugin's next answer, a token file
// rewritten).
func refreshGrace(o Options) time.Duration {
	return max(o.ReachProbeInterval, o.OutageProbeInterval)
}

// reachObserver hears one attempt's Monitor.
type reachObserver struct {
	g   *generation
	end *stopper
}

func (o reachObserver) Probed(r reach.Result) { o.g.c.probed(o.g, r) }

// Unreachable: the member serves from its caches meanwhile (fleet-wide
// Lists report it as failed), and restarts once its API server answers.
func (o reachObserver) Unreachable(err error) {
	err = o.g.redact(err)
	o.g.c.unreachable(o.g, err)
	o.g.log.Error(err, "cluster unreachable; serving from cache until it answers")
}

// Recovered: one probe went unanswered and nothing else failed; the
// member is Ready again as it runs.
func (o reachObserver) Recovered() {
	o.g.c.recovered(o.g)
	o.g.log.Info("cluster reachable again after one slow answer; its watches held, no restart")
}

func (o reachObserver) Reconnected() {
	o.g.log.Info("cluster reachable again; restarting it to resync")
	o.end.stop(errReconnected)
}

// Rejected credentials fail the member: its Manager could only ever see
// stale data.
func (o reachObserver) Rejected(err error) { o.end.stop(err) }

// Refused credentials are recorded; the member runs on while they may be
// renewed (reach.Options.RefreshGrace).
func (o reachObserver) Refused(err error) {
	err = o.g.redact(err)
	o.g.c.recordError(o.g, err)
	o.g.log.Error(err, "cluster's credentials refused; waiting for new ones before failing it", "within", refreshGrace(o.g.c.env.opts))
}

// Accepted: the credentials were renewed in place.
func (o reachObserver) Accepted() {
	o.g.log.Info("cluster's credentials accepted again; no restart")
}

// WatchFailed is recorded while the informers retry by themselves; a 403
// is one kind the identity may not read (a missing RBAC rule), and the
// member's other controllers carry on.
func (o reachObserver) WatchFailed(err error) { o.g.c.recordError(o.g, err) }

// probed records a probe of the live generation's API server.
func (c *cluster) probed(g *generation, r reach.Result) {
	c.mu.Lock()
	defer c.publishUnlock()
	if !c.liveLocked(g) || c.dead {
		return
	}
	c.status.Reachable = r.Err == nil
	c.status.LastProbe = r.At
	c.status.ProbeLatency = r.Took
	c.series.probed(r.Err == nil, r.Took)
}

// errReconnected ends an attempt whose API server answers again after an
// outage. The member restarts at once, with fresh lists, rather than wait
// for client-go's reflectors, whose retry backoff grows to 30s.
var errReconnected = errors.New("API server reachable again; restarting to resync")
