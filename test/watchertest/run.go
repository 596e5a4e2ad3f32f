package watchertest

import (
	"fmt"
	"testing"

	"github.com/mccr-dev/mccr/configwatcher"
)

// check is one of the subtests Run runs.
type check struct {
	name string
	run  func(*testing.T, *Harness)
}

// checks are Run's subtests, in order. The Stop checks come last: their
// leak check must not see what a first use of the watcher's kind starts
// once per process.
var checks = []check{
	{name: "JoinBeforeStart", run: joinBeforeStart},
	{name: "JoinAfterStart", run: joinAfterStart},
	{name: "Rotation", run: rotation},
	{name: "NoOpUpdates", run: noOpUpdates},
	{name: "Removal", run: removal},
	{name: "Rejoin", run: rejoin},
	{name: "Broken", run: broken},
	{name: "HostileNames", run: hostileNamesCheck},
	{name: "Stop", run: stopLeavesNothing},
	{name: "StopWithUnreadEvents", run: stopWithUnreadEvents},
	{name: "UnreadErrors", run: unreadErrors},
	{name: "StopAtOnce", run: stopAtOnce},
}

// Run checks the ConfigWatcher that h's sources make against the rules
// every ConfigWatcher keeps (see package configwatcher's ConfigWatcher and
// this package's doc), each in a subtest of t with a source and a watcher
// of its own. A failure says what the kit did, what it expected, and what
// came instead, naming the cluster.
//
// Run's subtests must not run in parallel with other tests of the
// process: the Stop checks look for goroutines left behind.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.NewSource == nil {
		t.Fatal("watchertest: Harness.NewSource is required")
	}
	h.defaults()
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) { c.run(t, &h) })
	}
}

func cluster(name string) Cluster { return Cluster{Name: name} }

func (s *stream) added(c Cluster) want {
	return want{typ: configwatcher.Added, name: s.src.ClusterName(c)}
}

func (s *stream) updated(c Cluster) want {
	return want{typ: configwatcher.Updated, name: s.src.ClusterName(c)}
}

func (s *stream) deleted(c Cluster) want {
	return want{typ: configwatcher.Deleted, name: s.src.ClusterName(c)}
}

// joinBeforeStart: clusters that exist when the watcher starts are each
// Added once, with configs that reach them.
func joinBeforeStart(t *testing.T, h *Harness) {
	s := newStream(t, h)
	a, b := cluster("a"), cluster("b")
	s.write(a)
	s.write(b)
	s.start()
	const while = "a and b written before the watcher started"
	evs := s.expect(while, s.added(a), s.added(b))
	s.reaches(while, evs[0].Config, a)
	s.reaches(while, evs[1].Config, b)
	s.quiet(while + ", then Added (each joins once)")
	s.noErrors("a source holding only good clusters")
}

// joinAfterStart: an empty source is no event; a cluster written while
// the watcher runs is Added once.
func joinAfterStart(t *testing.T, h *Harness) {
	s := newStream(t, h)
	s.start()
	s.quiet("an empty source")
	a := cluster("a")
	s.write(a)
	const while = "a written while the watcher runs"
	ev := s.expect(while, s.added(a))
	s.reaches(while, ev[0].Config, a)
	s.quiet(while + ", then Added (it joins once)")
	s.noErrors("a source holding only good clusters")
}

// rotation: new credentials are exactly one Updated, whose config reaches
// the cluster with them.
func rotation(t *testing.T, h *Harness) {
	s := newStream(t, h)
	a := cluster("a")
	s.write(a)
	s.start()
	s.expect("a written before the watcher started", s.added(a))
	a.Credentials = 1
	s.write(a)
	const while = "a's credentials rotated"
	ev := s.expect(while, s.updated(a))
	s.reaches(while, ev[0].Config, a)
	s.quiet(while + ", then Updated (one rotation is one Updated)")
	s.noErrors("a source holding only good clusters")
}

// noOpUpdates: what changes nothing of a cluster's config (a status
// heartbeat, an annotation nobody reads, the same content written again)
// is no event.
func noOpUpdates(t *testing.T, h *Harness) {
	s := newStream(t, h)
	a := cluster("a")
	s.write(a)
	s.start()
	s.expect("a written before the watcher started", s.added(a))
	s.touch(a)
	s.quiet("a touched without a change to its config")
	s.write(a)
	s.quiet("a written again with the same content")
	s.noErrors("a source holding only good clusters")
}

// removal: a deleted cluster is Deleted by name; the others stay.
func removal(t *testing.T, h *Harness) {
	s := newStream(t, h)
	a, b := cluster("a"), cluster("b")
	s.write(a)
	s.write(b)
	s.start()
	s.expect("a and b written before the watcher started", s.added(a), s.added(b))
	s.delete(a)
	s.expect("a deleted", s.deleted(a))
	s.quiet("a deleted, then Deleted (b stays)")
	s.delete(b)
	s.expect("b deleted", s.deleted(b))
	s.quiet("b deleted, then Deleted")
	s.noErrors("a source whose clusters were deleted as their owner deletes them")
}

// rejoin: a cluster's whole life, and a second one under the same name:
// Added, Updated, Deleted, Added again.
func rejoin(t *testing.T, h *Harness) {
	s := newStream(t, h)
	s.start()
	a := cluster("a")
	s.write(a)
	s.expect("a written", s.added(a))
	a.Credentials = 1
	s.write(a)
	s.expect("a's credentials rotated", s.updated(a))
	s.delete(a)
	s.expect("a deleted", s.deleted(a))
	a.Credentials = 0
	s.write(a)
	const while = "a written again after it was deleted"
	ev := s.expect(while, s.added(a))
	s.reaches(while, ev[0].Config, a)
	s.quiet(while + ", then Added")
	s.noErrors("a source holding only good clusters")
}

// broken: a broken cluster is an error naming its object and keeps its
// last good config: no Deleted, no Updated; repaired as it was, it is no
// event either; a cluster broken from the start is an error and no
// event; the other clusters see nothing of it.
func broken(t *testing.T, h *Harness) {
	s := newStream(t, h)
	a, b := cluster("a"), cluster("b")
	s.write(a)
	s.write(b)
	s.start()
	s.expect("a and b written before the watcher started", s.added(a), s.added(b))

	s.breakCluster(a)
	s.awaitError("a broken", s.src.Object(a))
	s.quiet("a broken: it keeps its last good config (no Deleted, no Updated)")
	s.write(a)
	s.quiet("a repaired with the content it had before it broke")

	c := cluster("c")
	s.breakCluster(c)
	s.awaitError("c written broken", s.src.Object(c))
	s.quiet("c written broken: it never joins")

	// The kept config is followed again once the object is good.
	a.Credentials = 1
	s.write(a)
	const while = "a, repaired, then given new credentials"
	ev := s.expect(while, s.updated(a))
	s.reaches(while, ev[0].Config, a)
	s.delete(a)
	s.expect("a deleted", s.deleted(a))
	s.quiet("a deleted, then Deleted (b stays)")
}

// stopLeavesNothing: Stop returns, however often and concurrently it is
// called; it closes both channels; no goroutine of the watcher is left.
func stopLeavesNothing(t *testing.T, h *Harness) {
	s := newStream(t, h)
	a := cluster("a")
	s.write(a) // before the snapshot: what the source starts to write is not the watcher's
	leaks := snapshot()
	s.start()
	s.expect("a written before the watcher started", s.added(a))
	s.stop("Stop, called 3 times at once and once more")
	s.closed()
	s.noLeaks(leaks)
}

// stopWithUnreadEvents: Stop returns while events wait to be read.
func stopWithUnreadEvents(t *testing.T, h *Harness) {
	s := newStream(t, h)
	for i := range 3 {
		s.write(cluster(fmt.Sprintf("a%d", i)))
	}
	s.start()
	s.waitPending()
	s.stop("Stop with 3 Added events unread")
	s.closed()
}

// unreadErrors: errors nobody reads hold nothing up: events still come,
// and Stop returns.
func unreadErrors(t *testing.T, h *Harness) {
	s := newStream(t, h)
	s.unread = true
	s.start()
	for i := range h.ErrorFlood {
		s.breakCluster(cluster(fmt.Sprintf("broken-%03d", i)))
	}
	good := cluster("good")
	s.write(good)
	while := fmt.Sprintf("good written after %d broken clusters, with Errors never read", h.ErrorFlood)
	ev := s.expect(while, s.added(good))
	s.reaches(while, ev[0].Config, good)
	s.stop(fmt.Sprintf("Stop with the errors of %d broken clusters unread", h.ErrorFlood))
	n := s.closed()
	t.Logf("errors left unread on Errors when Stop returned: %d", n)
}

// stopAtOnce: a watcher stopped right after it was made stops.
func stopAtOnce(t *testing.T, h *Harness) {
	s := newStream(t, h)
	s.write(cluster("a"))
	s.start()
	s.stop("Stop right after the watcher was made")
	s.closed()
}
