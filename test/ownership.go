package test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/mccr-dev/mccr/known"
)

var (
	// ErrOwnershipOverlap is returned by OwnershipReport.Check when a
	// cluster had two owners at once, wrapped with the cluster's name.
	ErrOwnershipOverlap = errors.New("two owners at once")
	// ErrOwnershipDark is returned by OwnershipReport.Check when a
	// cluster had no owner for longer than allowed, wrapped with the
	// cluster's name.
	ErrOwnershipDark = errors.New("no owner for too long")
	// ErrOwnershipUnmatched is returned by OwnershipReport.Check when a
	// Stop had no Start to end, wrapped with the replica and cluster.
	ErrOwnershipUnmatched = errors.New("stop without a start")
	// ErrNoClusterName is returned by the Start of an OwnershipRecorder's
	// runnable whose context names no cluster.
	ErrNoClusterName = errors.New("test: ownership: the runnable's context names no cluster: add it to a member Manager of a Server, or give Runnable a cluster name")
)

// An OwnershipRecorder records which replica ran which cluster and when,
// over a whole run of several replicas (several Servers sharding one
// fleet, in one process or several), and reports what matters to a
// sharded controller: no instant with two owners of a cluster (two
// Managers reconciling it, whose writes race), and no long instant with
// none (a cluster nobody reconciles).
//
// Add Setup to each replica's Server; it records each member Manager of
// that replica while it runs. Start and Stop record ownership by hand
// (from a Manager of your own, or a fake in a unit test). Its methods are
// safe for concurrent use. The zero value is ready to use.
type OwnershipRecorder struct {
	// Now is the recorder's clock; nil is time.Now. Set it before the
	// first Start, for example to a fake clock in a unit test of code
	// that reads the report.
	Now func() time.Time

	mu     sync.Mutex
	spans  []*ownershipSpan // in the order they started
	strays []string         // Stops that ended nothing
}

type ownershipSpan struct {
	replica, cluster string
	start, stop      time.Time
	stopped          bool
	// ending, once set, is the Manager's Stopped channel: the span ends
	// when it closes.
	ending <-chan struct{}
}

func (r *OwnershipRecorder) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Start records that replica began running cluster. A replica that starts
// a cluster it runs already counts twice: two Managers of one name in one
// process overlap like those of two replicas.
func (r *OwnershipRecorder) Start(replica, cluster string) { r.begin(replica, cluster) }

// Stop records that replica stopped running cluster; it ends the
// earliest span of theirs still open. A Stop with none open is reported
// by OwnershipReport.Check (ErrOwnershipUnmatched).
func (r *OwnershipRecorder) Stop(replica, cluster string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		if !s.stopped && s.replica == replica && s.cluster == cluster {
			s.stop, s.stopped = r.now(), true
			return
		}
	}
	r.strays = append(r.strays, fmt.Sprintf("replica %q, cluster %q", replica, cluster))
}

func (r *OwnershipRecorder) begin(replica, cluster string) *ownershipSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &ownershipSpan{replica: replica, cluster: cluster, start: r.now()}
	r.spans = append(r.spans, s)
	return s
}

// end ends the span s, which begin returned.
func (r *OwnershipRecorder) end(s *ownershipSpan) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !s.stopped {
		s.stop, s.stopped = r.now(), true
	}
}

// endWith ends the span s once stopped closes.
func (r *OwnershipRecorder) endWith(s *ownershipSpan, stopped <-chan struct{}) {
	r.mu.Lock()
	s.ending = stopped
	r.mu.Unlock()
	go func() {
		<-stopped
		r.end(s)
	}()
}

// settleLocked ends the spans whose Manager has stopped by now, so that
// what is read right after a Manager stopped sees it stopped, before the
// goroutine that waits for it has run.
func (r *OwnershipRecorder) settleLocked() {
	for _, s := range r.spans {
		if s.stopped || s.ending == nil {
			continue
		}
		select {
		case <-s.ending:
			s.stop, s.stopped = r.now(), true
		default:
		}
	}
}

// Owners returns the replicas that run cluster now, sorted; a replica
// appears once per span it has open. Tests wait on it (with Eventually)
// for a handover to complete.
func (r *OwnershipRecorder) Owners(cluster string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settleLocked()
	var owners []string
	for _, s := range r.spans {
		if !s.stopped && s.cluster == cluster {
			owners = append(owners, s.replica)
		}
	}
	slices.Sort(owners)
	return owners
}

// Setup returns a reconciler setup for a Server of replica (give it to
// Server.AddReconcilerSetup): it adds to every member Manager a runnable
// that learns its cluster's name from the context the member runs it
// with, and records the member's ownership while its controllers may
// run: it needs leader election, so on a replica whose host does not lead
// (a warm standby, whose members run and reconcile nothing) it owns
// nothing until that replica is elected.
func (r *OwnershipRecorder) Setup(replica string) func(ctrl.Manager) error {
	return func(mgr ctrl.Manager) error {
		rn := &ownershipRunnable{rec: r, replica: replica, elected: true}
		if s, ok := mgr.(interface{ Stopped() <-chan struct{} }); ok {
			rn.stopped = s.Stopped()
		}
		return mgr.Add(rn)
	}
}

// Runnable returns a runnable that records replica's ownership of cluster
// for as long as it runs, for a Manager of your own (or one Server member
// when cluster is not ""). With cluster "", it takes the cluster's name
// from its context, as a Server's members name theirs (known.ClusterFrom),
// and fails with ErrNoClusterName if there is none.
//
// It needs no leader election, so it runs from the moment the Manager's
// caches have synced, just before its controllers start, on every replica
// whose Manager runs; a Manager that runs controllers only while elected
// owns nothing until then, and should record with Start and Stop instead.
// Added by Setup to a Server's member, ownership ends once the Manager has
// stopped completely, its controllers' last Reconcile returned (Owners and
// Report called once it has see it ended); elsewhere, when the runnable's
// context ends, when the Manager begins to stop.
func (r *OwnershipRecorder) Runnable(replica, cluster string) manager.Runnable {
	return &ownershipRunnable{rec: r, replica: replica, cluster: cluster}
}

type ownershipRunnable struct {
	rec              *OwnershipRecorder
	replica, cluster string
	// stopped closes once the member Manager has stopped entirely.
	stopped <-chan struct{}
	// elected: the runnable starts with the Manager's controllers, once
	// the replica is elected (Setup's, in Server members).
	elected bool
}

func (o *ownershipRunnable) NeedLeaderElection() bool { return o.elected }

func (o *ownershipRunnable) Start(ctx context.Context) error {
	cluster := o.cluster
	if cluster == "" {
		var ok bool
		if cluster, ok = known.ClusterFrom(ctx); !ok {
			return fmt.Errorf("%w (replica %q)", ErrNoClusterName, o.replica)
		}
	}
	s := o.rec.begin(o.replica, cluster)
	<-ctx.Done()
	if o.stopped == nil {
		o.rec.end(s)
		return nil
	}
	// The Manager stops once this returns, along with its controllers: its
	// ownership ends then, not now.
	o.rec.endWith(s, o.stopped)
	return nil
}

// Report returns what happened to clusters between from and to: per
// cluster, who owned it when, the intervals with two or more owners, and
// those with none. Spans still open count as running until to. With no
// clusters named, it covers every cluster recorded.
//
// Pick from once every cluster should be owned (after the replicas have
// started and settled), or the startup shows as a dark interval; and to
// before the replicas stop. A report whose to is before its from covers
// nothing, and its Check fails.
func (r *OwnershipRecorder) Report(from, to time.Time, clusters ...string) OwnershipReport {
	r.mu.Lock()
	r.settleLocked()
	spans := make([]ownershipSpan, 0, len(r.spans))
	for _, s := range r.spans {
		spans = append(spans, *s)
	}
	strays := slices.Clone(r.strays)
	r.mu.Unlock()

	if len(clusters) == 0 {
		for _, s := range spans {
			clusters = append(clusters, s.cluster)
		}
	}
	clusters = slices.Clone(clusters)
	slices.Sort(clusters)
	clusters = slices.Compact(clusters)
	rep := OwnershipReport{From: from, To: to, Unmatched: strays}
	for _, name := range clusters {
		rep.Clusters = append(rep.Clusters, clusterOwnership(name, spans, from, to))
	}
	return rep
}

// OwnershipReport is what an OwnershipRecorder saw over a run.
type OwnershipReport struct {
	// From and To bound the run the report covers.
	From, To time.Time
	// Clusters are the clusters reported, sorted by name.
	Clusters []ClusterOwnership
	// Unmatched lists the Stops that ended no Start.
	Unmatched []string
}

// ClusterOwnership is one cluster's ownership over a report's run.
type ClusterOwnership struct {
	Cluster string
	// Starts counts the owners that began within the run.
	Starts int
	// Owned are the owners' spans within the run, in the order they
	// began, each with one owner.
	Owned []OwnershipInterval
	// Overlaps are the maximal intervals with two or more owners, each
	// with every owner it had.
	Overlaps []OwnershipInterval
	// Dark are the maximal intervals with no owner.
	Dark []OwnershipInterval
	// OverlapTotal, OverlapMax, DarkTotal and DarkMax sum and bound the
	// intervals above.
	OverlapTotal, OverlapMax time.Duration
	DarkTotal, DarkMax       time.Duration
}

// OwnershipInterval is a stretch of a run and who owned the cluster
// meanwhile.
type OwnershipInterval struct {
	From, To time.Time
	// Owners are the replicas, sorted, one entry per span.
	Owners []string
	// Open is set on an owner's span still running when the report's run
	// ended.
	Open bool
}

// Duration is how long the interval lasted.
func (i OwnershipInterval) Duration() time.Duration { return i.To.Sub(i.From) }

func clusterOwnership(name string, spans []ownershipSpan, from, to time.Time) ClusterOwnership {
	co := ClusterOwnership{Cluster: name}
	type edge struct {
		at      time.Time
		replica string
		delta   int
	}
	var edges []edge
	for _, s := range spans {
		if s.cluster != name {
			continue
		}
		stop, open := s.stop, !s.stopped || s.stop.After(to)
		if open {
			stop = to
		}
		if stop.Before(from) || s.start.After(to) {
			continue
		}
		if !s.start.Before(from) {
			co.Starts++
		}
		start := latest(s.start, from)
		co.Owned = append(co.Owned, OwnershipInterval{From: start, To: stop, Owners: []string{s.replica}, Open: open})
		if stop.After(start) {
			edges = append(edges, edge{start, s.replica, +1}, edge{stop, s.replica, -1})
		}
	}
	slices.SortStableFunc(edges, func(a, b edge) int { return a.at.Compare(b.at) })

	// Sweep the run: between two consecutive edge times the owners are
	// constant; adjacent stretches of the same kind (none, or two and
	// more) merge.
	owners := map[string]int{} // open spans per replica
	count := 0
	var (
		cur     *OwnershipInterval
		curKind int            // 0 none, 1 one owner, 2 overlap
		most    map[string]int // of an overlap: the most spans each replica had open
	)
	flush := func() {
		switch {
		case cur == nil:
		case curKind == 0:
			co.Dark = append(co.Dark, *cur)
		case curKind == 2:
			for replica, n := range most {
				for range n {
					cur.Owners = append(cur.Owners, replica)
				}
			}
			slices.Sort(cur.Owners)
			co.Overlaps = append(co.Overlaps, *cur)
		}
		cur = nil
	}
	at := from
	extend := func(until time.Time) {
		if !until.After(at) {
			return
		}
		kind := min(count, 2)
		if cur == nil || kind != curKind {
			flush()
			cur, curKind, most = &OwnershipInterval{From: at}, kind, map[string]int{}
		}
		cur.To = until
		if kind == 2 {
			for replica, n := range owners {
				most[replica] = max(most[replica], n)
			}
		}
		at = until
	}
	for i := 0; i < len(edges); {
		t := edges[i].at
		extend(t)
		for ; i < len(edges) && edges[i].at.Equal(t); i++ {
			e := edges[i]
			owners[e.replica] += e.delta
			if owners[e.replica] == 0 {
				delete(owners, e.replica)
			}
			count += e.delta
		}
	}
	extend(to)
	flush()

	for _, o := range co.Overlaps {
		co.OverlapTotal += o.Duration()
		co.OverlapMax = max(co.OverlapMax, o.Duration())
	}
	for _, d := range co.Dark {
		co.DarkTotal += d.Duration()
		co.DarkMax = max(co.DarkMax, d.Duration())
	}
	return co
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Check returns nil if no cluster had two owners at any instant of the
// run, none was without an owner for longer than maxDark, and every Stop
// ended a Start; otherwise an error naming every cluster and interval at
// fault (errors.Is ErrOwnershipOverlap, ErrOwnershipDark,
// ErrOwnershipUnmatched). A run that ends before it starts, which checks
// nothing, is an error too.
func (r OwnershipReport) Check(maxDark time.Duration) error {
	if r.To.Before(r.From) {
		return fmt.Errorf("test: ownership: the run ends at %s, before it starts at %s: nothing to check", r.To.Format(time.RFC3339Nano), r.From.Format(time.RFC3339Nano))
	}
	var errs []error
	for _, c := range r.Clusters {
		for _, o := range c.Overlaps {
			errs = append(errs, fmt.Errorf("cluster %s: %w: %s for %s (%s)", c.Cluster, ErrOwnershipOverlap, strings.Join(o.Owners, " and "), o.Duration(), r.span(o)))
		}
		for _, d := range c.Dark {
			if d.Duration() > maxDark {
				errs = append(errs, fmt.Errorf("cluster %s: %w: none for %s (%s), more than %s", c.Cluster, ErrOwnershipDark, d.Duration(), r.span(d), maxDark))
			}
		}
	}
	for _, u := range r.Unmatched {
		errs = append(errs, fmt.Errorf("%w: %s", ErrOwnershipUnmatched, u))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("test: ownership over %s:\n%w\n%s", r.To.Sub(r.From), errors.Join(errs...), r)
}

// span shows an interval relative to the start of the run.
func (r OwnershipReport) span(i OwnershipInterval) string {
	to := "+" + i.To.Sub(r.From).String()
	if i.Open {
		to = "end"
	}
	return fmt.Sprintf("+%s–%s", i.From.Sub(r.From), to)
}

// String summarizes the report, one cluster a paragraph, times relative to
// the start of the run.
func (r OwnershipReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ownership from %s for %s, %d clusters\n", r.From.Format("15:04:05.000"), r.To.Sub(r.From), len(r.Clusters))
	for _, c := range r.Clusters {
		fmt.Fprintf(&b, "%s: %d starts; overlap %s (max %s, %d intervals); dark %s (max %s, %d intervals)\n",
			c.Cluster, c.Starts, c.OverlapTotal, c.OverlapMax, len(c.Overlaps), c.DarkTotal, c.DarkMax, len(c.Dark))
		for _, o := range c.Owned {
			fmt.Fprintf(&b, "  %s %s\n", o.Owners[0], r.span(o))
		}
		for _, o := range c.Overlaps {
			fmt.Fprintf(&b, "  overlap %s: %s\n", r.span(o), strings.Join(o.Owners, ", "))
		}
		for _, d := range c.Dark {
			fmt.Fprintf(&b, "  dark %s\n", r.span(d))
		}
	}
	for _, u := range r.Unmatched {
		fmt.Fprintf(&b, "stop without a start: %s\n", u)
	}
	return b.String()
}
