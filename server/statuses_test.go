package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"k8s.io/client-go/rest"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/mccr-dev/mccr/config"
	membermgr "github.com/mccr-dev/mccr/internal/member"
	"github.com/mccr-dev/mccr/internal/reach"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/test"
)

// TestStatusesAndNamesFollowTheFleet: Statuses and ClusterNames list
// exactly the members, sorted by name, through adds, deletes and names
// added again, also while other goroutines change the fleet (run with
// -race).
func TestStatusesAndNamesFollowTheFleet(t *testing.T) {
	srv := unstartedServer(t)
	rng := rand.New(rand.NewPCG(3, 4))
	want := map[string]bool{}
	check := func(step int) {
		t.Helper()
		exp := slices.Sorted(func(yield func(string) bool) {
			for n := range want {
				if !yield(n) {
					return
				}
			}
		})
		statuses := srv.Statuses()
		got := make([]string, 0, len(statuses))
		for _, st := range statuses {
			got = append(got, st.Name)
		}
		if !slices.Equal(got, exp) {
			t.Fatalf("step %d: Statuses() names %v\nwant %v", step, got, exp)
		}
		if names := srv.ClusterNames(); !slices.Equal(names, exp) {
			t.Fatalf("step %d: ClusterNames() = %v\nwant %v", step, names, exp)
		}
	}
	// A name deleted and added again (a new record), and one deleted
	// while another is added, between two reads: as many members as
	// before, not the same.
	for _, name := range []string{"m-1", "m-2"} {
		if err := srv.Add(config.NewNamedConfig(name, &rest.Config{Host: "https://127.0.0.1:1"})); err != nil {
			t.Fatal(err)
		}
		want[name] = true
	}
	check(-3)
	for _, op := range []struct {
		name string
		add  bool
	}{{"m-1", false}, {"m-1", true}, {"m-2", false}, {"m-3", true}} {
		var err error
		if op.add {
			err = srv.Add(config.NewNamedConfig(op.name, &rest.Config{Host: "https://127.0.0.1:1"}))
			want[op.name] = true
		} else {
			err = srv.Delete(op.name)
			delete(want, op.name)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	check(-2)
	for step := range 3000 {
		// Names that are prefixes of each other, and sort around them.
		name := fmt.Sprintf("m-%d", rng.IntN(60))
		if rng.IntN(4) == 0 {
			name += "-0"
		}
		if want[name] {
			if err := srv.Delete(name); err != nil {
				t.Fatal(err)
			}
			delete(want, name)
		} else {
			if err := srv.Add(config.NewNamedConfig(name, &rest.Config{Host: "https://127.0.0.1:1"})); err != nil {
				t.Fatal(err)
			}
			want[name] = true
		}
		if step < 300 || step%2 == 0 {
			check(step)
		}
	}
	check(-1)

	// Readers while writers add and delete names of their own.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				st := srv.Statuses()
				if !slices.IsSortedFunc(st, func(a, b ClusterStatus) int { return strings.Compare(a.Name, b.Name) }) {
					t.Error("Statuses() not sorted")
					return
				}
			}
		})
	}
	var writers sync.WaitGroup
	for w := range 2 {
		writers.Go(func() {
			for i := range 400 {
				name := fmt.Sprintf("w%d-%d", w, i%20)
				if i/20%2 == 0 {
					_ = srv.Add(config.NewNamedConfig(name, &rest.Config{Host: "https://127.0.0.1:1"}))
				} else {
					_ = srv.Delete(name)
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	wg.Wait()
	for _, n := range srv.ClusterNames() {
		_ = srv.Delete(n)
	}
}

// liveRecord makes a generation of c's desired config live, as a run
// spawns one, without running it: the test reports to the record as the
// generation would. end stops it as a generation ends (unrouted, exited).
func liveRecord(c *cluster) (g *generation, end func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g = newGeneration(c, c.desired)
	g.begin(context.Background(), nil)
	c.gen = g
	return g, func() {
		g.stop()
		c.route(g, nil, false)
		c.exited(g)
		close(g.done)
	}
}

// kindsManager is a member's Manager as its record reads it for WaitingFor
// and Unserved (kindsReporter), and nothing else.
type kindsManager struct {
	manager.Manager // nil: the record calls nothing else of it but GetClient

	mu       sync.Mutex
	waiting  []string
	unserved []membermgr.UnservedKind
	changed  func()
}

func (m *kindsManager) GetClient() crclient.Client { return nil }

func (m *kindsManager) WaitingKinds() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.waiting)
}

func (m *kindsManager) UnservedKinds() []membermgr.UnservedKind {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.unserved)
}

func (m *kindsManager) OnKindsChanged(fn func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.changed = fn
}

// set changes the reports and tells the record, as a member does: after
// the change, with its lock released.
func (m *kindsManager) set(waiting []string, unserved ...membermgr.UnservedKind) {
	m.mu.Lock()
	m.waiting, m.unserved = waiting, unserved
	fn := m.changed
	m.mu.Unlock()
	if fn != nil {
		fn()
	}
}

func (m *kindsManager) told() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed != nil
}

// statusIn returns name's status as Statuses lists it.
func statusIn(srv *Server, name string) (ClusterStatus, bool) {
	for _, st := range srv.Statuses() {
		if st.Name == name {
			return st, true
		}
	}
	return ClusterStatus{}, false
}

// TestStatusesShowChangesAtOnce: every change a record makes is in
// Statuses, and in Status, as soon as the call that made it returns:
// phases, errors and retries, probes, Properties, and what the member's
// Manager reports of its kinds (WaitingFor, Unserved) as soon as it says
// they changed; also while other names come and go, which rebuilds
// Statuses' order.
func TestStatusesShowChangesAtOnce(t *testing.T) {
	srv := unstartedServer(t)
	nc := config.NewNamedConfig("m", &rest.Config{Host: "https://127.0.0.1:1"})
	nc.Properties = map[string]string{"region": "eu"}
	if err := srv.Add(nc); err != nil {
		t.Fatal(err)
	}
	c := srv.clusters.get("m")
	others := 0
	step := 0
	check := func(what string, ok func(ClusterStatus) bool) {
		t.Helper()
		step++
		// Other names come and go between some steps: a new list.
		if step%2 == 0 {
			others++
			if err := srv.Add(config.NewNamedConfig(fmt.Sprintf("other-%d", others), &rest.Config{Host: "https://127.0.0.1:1"})); err != nil {
				t.Fatal(err)
			}
		}
		if step%3 == 0 {
			if err := srv.Delete(fmt.Sprintf("other-%d", others)); err != nil {
				t.Fatal(err)
			}
		}
		st, found := statusIn(srv, "m")
		if !found || !ok(st) {
			t.Fatalf("%s: Statuses shows %+v (listed: %v)", what, st, found)
		}
		one, err := srv.Status("m")
		if err != nil || !ok(one) {
			t.Fatalf("%s: Status shows %+v, %v", what, one, err)
		}
	}
	check("added", func(st ClusterStatus) bool { return st.Phase == PhasePending && st.Properties["region"] == "eu" })

	g, end := liveRecord(c)
	c.setPhase(g, PhaseStarting, nil)
	check("starting", func(st ClusterStatus) bool { return st.Phase == PhaseStarting })
	mgr := &kindsManager{}
	mgr.set([]string{"example.com/v1, Kind=Early"}) // before Ready: read when Ready
	c.ready(g, mgr, 1500*time.Millisecond)
	check("ready", func(st ClusterStatus) bool {
		return st.Phase == PhaseReady && st.TimeToReady == 1500*time.Millisecond && slices.Equal(st.WaitingFor, []string{"example.com/v1, Kind=Early"})
	})
	if !mgr.told() {
		t.Fatal("the record does not follow its Manager's kinds")
	}
	widget := "example.com/v1, Kind=Widget"
	mgr.set([]string{widget})
	check("waiting for a kind", func(st ClusterStatus) bool { return slices.Equal(st.WaitingFor, []string{widget}) })
	secrets := membermgr.UnservedKind{Kind: "/v1, Kind=Secret", Reason: "the cluster's identity may not list or watch it"}
	mgr.set(nil, secrets)
	check("a kind forbidden, the other served", func(st ClusterStatus) bool {
		return st.WaitingFor == nil && len(st.Unserved) == 1 && st.Unserved[0] == UnservedKind(secrets)
	})
	mgr.set(nil)
	check("every kind served", func(st ClusterStatus) bool { return st.WaitingFor == nil && st.Unserved == nil })

	probedAt := time.Now()
	c.probed(g, reach.Result{At: probedAt, Took: 3 * time.Millisecond})
	check("probed", func(st ClusterStatus) bool {
		return st.Reachable && st.LastProbe.Equal(probedAt) && st.ProbeLatency == 3*time.Millisecond
	})
	down := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	c.probed(g, reach.Result{At: probedAt.Add(time.Second), Took: time.Second, Err: down})
	c.unreachable(g, down)
	check("unreachable", func(st ClusterStatus) bool {
		return st.Phase == PhaseUnreachable && !st.Reachable && st.LastError != nil
	})
	c.recovered(g)
	check("recovered", func(st ClusterStatus) bool { return st.Phase == PhaseReady })
	c.recordError(g, errors.New("watch of Widgets failed"))
	check("a watch error", func(st ClusterStatus) bool {
		return st.LastError != nil && strings.Contains(st.LastError.Error(), "Widgets")
	})

	// The Manager stops: what it reported goes with it, and its late word
	// is not heard.
	mgr.set([]string{widget})
	c.route(g, nil, false)
	check("unrouted", func(st ClusterStatus) bool { return st.WaitingFor == nil })
	mgr.set([]string{"example.com/v1, Kind=Late"})
	check("a stopped Manager's kinds", func(st ClusterStatus) bool { return st.WaitingFor == nil })
	c.failed(g, down, time.Minute)
	check("failed", func(st ClusterStatus) bool {
		return st.Phase == PhaseFailed && st.Failures == 1 && !st.NextRetry.IsZero() && st.LastError != nil
	})
	c.restarted(g)
	check("restarted", func(st ClusterStatus) bool { return st.Restarts == 1 })
	end()
	check("stopped", func(st ClusterStatus) bool { return st.Phase == PhaseStopped })

	changed := config.NewNamedConfig("m", &rest.Config{Host: "https://127.0.0.1:1"})
	changed.Properties = map[string]string{"region": "us"}
	if err := srv.Update(changed); err != nil {
		t.Fatal(err)
	}
	check("new Properties", func(st ClusterStatus) bool { return st.Properties["region"] == "us" })

	if err := srv.Delete("m"); err != nil {
		t.Fatal(err)
	}
	if _, found := statusIn(srv, "m"); found {
		t.Fatal("Statuses lists a deleted member")
	}
	if _, err := srv.Status("m"); !errors.Is(err, ErrClusterNotFound) {
		t.Fatalf("Status of a deleted member: %v", err)
	}
}

// TestStatusesCannotCorruptTheServer: Statuses shares each member's map and
// slices with its callers (copying them per call would cost more than the
// call); a caller that changes them anyway changes nothing that Status,
// ClusterProperties or the record hold. Status hands out copies of its own.
func TestStatusesCannotCorruptTheServer(t *testing.T) {
	srv := unstartedServer(t)
	nc := config.NewNamedConfig("m", &rest.Config{Host: "https://127.0.0.1:1"})
	nc.Properties = map[string]string{"region": "eu"}
	if err := srv.Add(nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Delete("m") })
	c := srv.clusters.get("m")
	g, end := liveRecord(c)
	defer end()
	mgr := &kindsManager{}
	secrets := membermgr.UnservedKind{Kind: "/v1, Kind=Secret", Reason: "forbidden"}
	mgr.set([]string{"example.com/v1, Kind=Widget"}, secrets)
	c.ready(g, mgr, time.Second)
	intact := func(st ClusterStatus) bool {
		return maps.Equal(st.Properties, map[string]string{"region": "eu"}) &&
			slices.Equal(st.WaitingFor, []string{"example.com/v1, Kind=Widget"}) &&
			slices.Equal(st.Unserved, []UnservedKind{UnservedKind(secrets)})
	}
	spoil := func(st ClusterStatus) {
		st.Properties["region"] = "spoiled"
		st.Properties["extra"] = "spoiled"
		st.WaitingFor[0] = "spoiled"
		st.Unserved[0].Kind = "spoiled"
	}
	st, _ := statusIn(srv, "m")
	if !intact(st) {
		t.Fatalf("Statuses shows %+v", st)
	}
	spoil(st)
	one, err := srv.Status("m")
	if err != nil || !intact(one) {
		t.Fatalf("Status after a caller changed what Statuses returned: %+v, %v", one, err)
	}
	spoil(one)
	if one, _ := srv.Status("m"); !intact(one) {
		t.Fatalf("Status after a caller changed what Status returned: %+v", one)
	}
	props, err := srv.ClusterProperties(known.WithCluster(t.Context(), "m"))
	if err != nil || !maps.Equal(props, map[string]string{"region": "eu"}) {
		t.Fatalf("ClusterProperties = %v, %v", props, err)
	}
	c.mu.Lock()
	own := c.status
	c.mu.Unlock()
	if !intact(own) {
		t.Fatalf("the record holds %+v", own)
	}
	// Published again (a probe): the record's own view is what it shows.
	c.probed(g, reach.Result{At: time.Now(), Took: time.Millisecond})
	if one, _ := srv.Status("m"); !intact(one) {
		t.Fatalf("Status after a probe: %+v", one)
	}
}

// TestStatusesRace reads Statuses, Status and ClusterNames from many
// goroutines while members come and go, change phase, are probed and
// report kinds, all at once (run with -race). Every status read is of a
// member as some moment saw it, and once the writers are done, Statuses
// shows every member exactly as its record last published it: no change
// was lost, whichever view of the names it happened in.
func TestStatusesRace(t *testing.T) {
	srv := unstartedServer(t)
	const writers, names, rounds = 4, 12, 150
	for w := range writers {
		// A member that stays, changing all along.
		if err := srv.Add(config.NewNamedConfig(fmt.Sprintf("w%d-stays", w), &rest.Config{Host: "https://127.0.0.1:1"})); err != nil {
			t.Fatal(err)
		}
	}
	seeds := [writers]uint64{1, 2, 3, 4}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for r := range 4 {
		readers.Go(func() {
			// Odd readers reuse one buffer through AppendStatuses, as a
			// poller does, each call writing over the last one's statuses.
			var buf []ClusterStatus
			read := srv.Statuses
			if r%2 == 1 {
				read = func() []ClusterStatus {
					buf = srv.AppendStatuses(buf[:0])
					return buf
				}
			}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				switch i % 3 {
				case 0:
					if r == 0 && i%30 == 0 {
						checkView(t, &srv.clusters.order)
					}
					all := read()
					if !slices.IsSortedFunc(all, func(a, b ClusterStatus) int { return strings.Compare(a.Name, b.Name) }) {
						t.Error("Statuses() not sorted")
						return
					}
					for _, st := range all {
						if st.Name == "" || st.Phase == "" {
							t.Errorf("Statuses() lists %+v", st)
							return
						}
						_ = len(st.Properties["n"]) + len(st.WaitingFor) + len(st.Unserved)
					}
				case 1:
					name := fmt.Sprintf("w%d-%d", r%writers, i%names)
					if st, err := srv.Status(name); err == nil && (st.Name != name || st.Phase == "") {
						t.Errorf("Status(%q) = %+v", name, st)
						return
					}
				case 2:
					if !slices.IsSorted(srv.ClusterNames()) {
						t.Error("ClusterNames() not sorted")
						return
					}
				}
			}
		})
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seeds[w], 7))
			stays := srv.clusters.get(fmt.Sprintf("w%d-stays", w))
			g, end := liveRecord(stays)
			mgr := &kindsManager{}
			stays.ready(g, mgr, time.Second)
			for i := range rounds {
				name := fmt.Sprintf("w%d-%d", w, rng.IntN(names))
				nc := config.NewNamedConfig(name, &rest.Config{Host: "https://127.0.0.1:1"})
				nc.Properties = map[string]string{"n": fmt.Sprint(i)}
				if err := srv.Add(nc); err != nil && !errors.Is(err, ErrClusterExists) {
					t.Error(err)
					return
				}
				c := srv.clusters.get(name)
				if c == nil {
					continue
				}
				cg, cend := liveRecord(c)
				c.setPhase(cg, PhaseStarting, nil)
				cm := &kindsManager{}
				c.ready(cg, cm, time.Millisecond)
				cm.set([]string{fmt.Sprintf("example.com/v1, Kind=K%d", i)})
				c.probed(cg, reach.Result{At: time.Now(), Took: time.Millisecond})
				stays.probed(g, reach.Result{At: time.Now(), Took: time.Duration(i)})
				mgr.set([]string{fmt.Sprintf("example.com/v1, Kind=S%d", i)})
				stays.setPhase(g, []Phase{PhaseReady, PhaseUnreachable}[i%2], nil)
				cm.set(nil, membermgr.UnservedKind{Kind: "/v1, Kind=Secret", Reason: "forbidden"})
				cend()
				if rng.IntN(2) == 0 {
					if err := srv.Delete(name); err != nil && !errors.Is(err, ErrClusterNotFound) {
						t.Error(err)
						return
					}
				}
			}
			end()
		})
	}
	wg.Wait()
	checkView(t, &srv.clusters.order)

	// Last words: every member of a larger fleet is probed once more while
	// names come and go, so that Statuses builds its order again and
	// again meanwhile; none of these last changes may be lost.
	bulk := make([]*cluster, 1500)
	for i := range bulk {
		name := fmt.Sprintf("bulk-%04d", i)
		if err := srv.Add(config.NewNamedConfig(name, &rest.Config{Host: "https://127.0.0.1:1"})); err != nil {
			t.Fatal(err)
		}
		bulk[i] = srv.clusters.get(name)
	}
	churned := make(chan struct{})
	var churn sync.WaitGroup
	churn.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-churned:
				return
			default:
			}
			name := fmt.Sprintf("churn-%d", i%3)
			if i%2 == 0 {
				_ = srv.Add(config.NewNamedConfig(name, &rest.Config{Host: "https://127.0.0.1:1"}))
			} else {
				_ = srv.Delete(name)
			}
		}
	})
	for i, c := range bulk {
		c.probed(nil, reach.Result{At: time.Unix(int64(i), 0), Took: time.Millisecond})
		if i%100 == 0 {
			runtime.Gosched()
		}
	}
	close(churned)
	churn.Wait()
	close(stop)
	readers.Wait()
	checkView(t, &srv.clusters.order)

	// Quiet now: Statuses is every desired record's last published status.
	listed := srv.ClusterNames()
	want := make([]ClusterStatus, 0, len(listed))
	for _, name := range listed {
		c := srv.clusters.get(name)
		c.mu.Lock()
		p := c.pub.Load()
		st := c.status
		desired := c.desired != nil
		c.mu.Unlock()
		if !desired || p == nil {
			t.Fatalf("%s: listed, desired %v, published %v", name, desired, p != nil)
		}
		if !sameStatus(p.copied(), st) {
			t.Fatalf("%s: published %+v\nthe record holds %+v", name, p.copied(), st)
		}
		want = append(want, p.status)
	}
	if got := srv.Statuses(); !slices.EqualFunc(got, want, sameStatus) {
		t.Fatalf("Statuses once quiet:\n%+v\nwant\n%+v", got, want)
	}
	if got := srv.AppendStatuses(make([]ClusterStatus, 3)[:0]); !slices.EqualFunc(got, want, sameStatus) {
		t.Fatalf("AppendStatuses once quiet:\n%+v\nwant\n%+v", got, want)
	}
	for _, n := range srv.ClusterNames() {
		_ = srv.Delete(n)
	}
}

// TestStatusesBuildWindow: a member that publishes while Statuses builds
// its view of a new list of names, after the build has read its status, is
// shown as it published, by the same call.
func TestStatusesBuildWindow(t *testing.T) {
	srv := unstartedServer(t)
	for _, name := range []string{"a", "b"} {
		if err := srv.Add(config.NewNamedConfig(name, &rest.Config{Host: "https://127.0.0.1:1"})); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Delete(name) })
	}
	srv.Statuses() // a view of [a b]
	a := srv.clusters.get("a")
	probedAt := time.Unix(1000, 0)
	o := &srv.clusters.order
	o.testBuilt = func() {
		o.testBuilt = nil
		a.probed(nil, reach.Result{At: probedAt, Took: time.Millisecond})
	}
	if err := srv.Add(config.NewNamedConfig("c", &rest.Config{Host: "https://127.0.0.1:1"})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Delete("c") })
	if st, _ := statusIn(srv, "a"); !st.LastProbe.Equal(probedAt) {
		t.Errorf("Statuses shows a probed at %v, want %v", st.LastProbe, probedAt)
	}
	if o.testBuilt != nil {
		t.Fatal("no view was built")
	}
	checkView(t, o)
}

// checkView checks what Statuses relies on between two calls: the view
// holds, for each record in it not marked stale, the status it published
// last. (Statuses itself could not tell a lost change from one that the
// next list's view picked up.)
func checkView(t *testing.T, o *memberOrder) {
	t.Helper()
	o.mu.Lock() // no view is being built
	defer o.mu.Unlock()
	o.viewMu.Lock()
	defer o.viewMu.Unlock()
	for i, c := range o.records {
		if c == nil || c.stale {
			continue
		}
		p := c.published()
		if o.shown[i] != (p != nil) || p != nil && !sameStatus(o.view[i], p.status) {
			t.Errorf("%s: the view holds %+v (shown %v), its record published %+v", c.name, o.view[i], o.shown[i], p)
			return
		}
	}
}

// sameStatus says whether a and b are the same status, LastError the same
// error value.
func sameStatus(a, b ClusterStatus) bool {
	return a.Name == b.Name && a.Source == b.Source && a.Owner == b.Owner &&
		maps.Equal(a.Properties, b.Properties) && (a.Properties == nil) == (b.Properties == nil) &&
		a.Phase == b.Phase && a.Since.Equal(b.Since) &&
		a.LastError == b.LastError && //nolint:errorlint // the same value, not the same kind of error
		a.NextRetry.Equal(b.NextRetry) && a.Failures == b.Failures && a.Restarts == b.Restarts &&
		a.TimeToReady == b.TimeToReady &&
		slices.Equal(a.WaitingFor, b.WaitingFor) && (a.WaitingFor == nil) == (b.WaitingFor == nil) &&
		slices.Equal(a.Unserved, b.Unserved) && (a.Unserved == nil) == (b.Unserved == nil) &&
		a.Reachable == b.Reachable && a.LastProbe.Equal(b.LastProbe) && a.ProbeLatency == b.ProbeLatency
}

// BenchmarkStatuses is Statuses, ClusterNames and Status of one member
// with 10,000 members (recordFleet: records without API servers, in the
// phases and with the properties and probe results of a running fleet),
// and what a probe's result costs the record that publishes it. Besides
// the wall time per call it reports the median CPU time of the calling
// thread per call (µs-cpu-p50), which a busy machine inflates less.
// Statuses/after-probes has every member probed again between two calls,
// as a caller that reads the fleet every 5 s or more finds it;
// Statuses/fresh-memory returns the heap's free memory to the system
// before each call, so that what the call allocates is faulted in by the
// kernel; Statuses/after-add-and-delete has a member added and another
// deleted.
func BenchmarkStatuses(b *testing.B) {
	const n = 10000
	srv := recordFleet(b, n)
	records := make([]*cluster, n)
	for i := range records {
		records[i] = srv.clusters.get(fmt.Sprintf("cluster-%05d", i))
	}
	statuses := func() {
		if len(srv.Statuses()) != n {
			b.Fatal("members lost")
		}
	}
	b.Run("Statuses", func(b *testing.B) { benchCalls(b, nil, statuses) })
	var buf []ClusterStatus
	b.Run("AppendStatuses/reused", func(b *testing.B) {
		// A poller's buffer, written over by each call.
		benchCalls(b, nil, func() {
			if buf = srv.AppendStatuses(buf[:0]); len(buf) != n {
				b.Fatal("members lost")
			}
		})
	})
	b.Run("AppendStatuses/reused/fresh-memory", func(b *testing.B) {
		benchCalls(b, debug.FreeOSMemory, func() {
			if buf = srv.AppendStatuses(buf[:0]); len(buf) != n {
				b.Fatal("members lost")
			}
		})
	})
	b.Run("Statuses/after-probes", func(b *testing.B) {
		benchCalls(b, func() {
			for _, c := range records {
				c.probed(nil, reach.Result{At: time.Now(), Took: time.Millisecond})
			}
		}, statuses)
	})
	b.Run("Statuses/fresh-memory", func(b *testing.B) {
		// Memory returned to the system before each call: the result's
		// pages are faulted in afresh (2.8 MiB at 10,000 members), as in a
		// process whose heap grows with each call.
		benchCalls(b, debug.FreeOSMemory, statuses)
	})
	b.Run("Statuses/after-add-and-delete", func(b *testing.B) {
		// Two new lists of names: one more member, then one fewer.
		nc := config.NewNamedConfig("cluster-05000-extra", &rest.Config{Host: "https://127.0.0.1:1"})
		benchCalls(b, func() {
			if err := srv.Add(nc); err != nil {
				b.Fatal(err)
			}
			srv.Statuses()
			if err := srv.Delete(nc.Name); err != nil {
				b.Fatal(err)
			}
		}, statuses)
	})
	b.Run("ClusterNames", func(b *testing.B) {
		benchCalls(b, nil, func() {
			if len(srv.ClusterNames()) != n {
				b.Fatal("members lost")
			}
		})
	})
	b.Run("Status", func(b *testing.B) {
		benchCalls(b, nil, func() {
			if _, err := srv.Status("cluster-05000"); err != nil {
				b.Fatal(err)
			}
		})
	})
	i := 0
	b.Run("Probed", func(b *testing.B) {
		benchCalls(b, nil, func() {
			records[i%n].probed(nil, reach.Result{At: time.Now(), Took: time.Millisecond})
			i++
		})
	})
}

// recordFleet is an unstarted Server with n members, cluster-00000 on,
// whose records say what a running fleet's do: most Ready, some Syncing,
// Failed or Unreachable, each with three Properties (as an Argo CD cluster
// Secret gives them) and a probe result. Its records are driven the way a
// generation drives them, without one.
func recordFleet(tb testing.TB, n int) *Server {
	tb.Helper()
	srv := unstartedServer(tb)
	phases := []Phase{PhaseReady, PhaseReady, PhaseReady, PhaseReady, PhaseSyncing, PhaseFailed, PhaseUnreachable}
	probed := time.Now()
	for i := range n {
		name := fmt.Sprintf("cluster-%05d", i)
		nc := config.NewNamedConfig(name, &rest.Config{Host: "https://127.0.0.1:1"})
		nc.Properties = map[string]string{
			"argocd.argoproj.io/project": fmt.Sprintf("team-%d", i%20),
			"argocd.argoproj.io/shard":   fmt.Sprint(i % 4),
			"label:region":               fmt.Sprintf("region-%d", i%3),
		}
		if err := srv.Add(nc); err != nil {
			tb.Fatal(err)
		}
		c := srv.clusters.get(name)
		var err error
		if p := phases[i%len(phases)]; p == PhaseFailed || p == PhaseUnreachable {
			err = errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
		}
		c.setPhase(nil, phases[i%len(phases)], err)
		c.probed(nil, reach.Result{At: probed, Took: time.Millisecond})
	}
	tb.Cleanup(func() {
		for i := range n {
			_ = srv.Delete(fmt.Sprintf("cluster-%05d", i))
		}
	})
	return srv
}

// benchCalls runs call in b's loop on one OS thread, each time after
// between (when set, not timed), and reports the median CPU time the
// thread spent in a call.
func benchCalls(b *testing.B, between, call func()) {
	b.ReportAllocs()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var used []time.Duration
	for b.Loop() {
		if between != nil {
			b.StopTimer()
			between()
			b.StartTimer()
		}
		begin := test.ThreadCPUTime()
		call()
		used = append(used, test.ThreadCPUTime()-begin)
	}
	slices.Sort(used)
	b.ReportMetric(float64(used[len(used)/2].Nanoseconds())/1e3, "µs-cpu-p50")
}

// TestAppendStatuses: AppendStatuses keeps what dst holds and appends
// what Statuses returns, and with the buffer of its last call allocates
// nothing, however the fleet changed in between (a poller's use).
func TestAppendStatuses(t *testing.T) {
	const n = 500
	srv := recordFleet(t, n)
	kept := ClusterStatus{Name: "kept by the caller"}
	got := srv.AppendStatuses([]ClusterStatus{kept})
	if len(got) != n+1 || got[0].Name != kept.Name || !slices.EqualFunc(got[1:], srv.Statuses(), sameStatus) {
		t.Fatalf("AppendStatuses after one status of the caller's: %d statuses, first %q; want %d, the caller's then Statuses'", len(got), got[0].Name, n+1)
	}

	buf := srv.AppendStatuses(nil)
	c := srv.clusters.get("cluster-00007")
	probedAt := time.Now().Add(time.Hour)
	allocs := testing.AllocsPerRun(20, func() {
		c.probed(nil, reach.Result{At: probedAt, Took: 2 * time.Millisecond})
		buf = srv.AppendStatuses(buf[:0])
	})
	// The probe publishes one status (one allocation); the call, none.
	if allocs > 1 {
		t.Errorf("AppendStatuses with its last buffer: %.0f allocations per call with a probe between, want the probe's 1", allocs)
	}
	if st := buf[7]; st.Name != "cluster-00007" || !st.LastProbe.Equal(probedAt) {
		t.Errorf("reused buffer shows %s probed at %s, want cluster-00007 at %s", st.Name, st.LastProbe, probedAt)
	}

	// A member gone, another come: the reused buffer follows.
	if err := srv.Delete("cluster-00003"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Add(config.NewNamedConfig("cluster-00003x", &rest.Config{Host: "https://127.0.0.1:1"})); err != nil {
		t.Fatal(err)
	}
	buf = srv.AppendStatuses(buf[:0])
	if !slices.EqualFunc(buf, srv.Statuses(), sameStatus) {
		t.Fatal("reused buffer after a Delete and an Add differs from Statuses")
	}
	if i := slices.IndexFunc(buf, func(st ClusterStatus) bool { return st.Name == "cluster-00003" }); i >= 0 {
		t.Errorf("deleted member still listed at %d", i)
	}
	t.Cleanup(func() { _ = srv.Delete("cluster-00003x") })
}

// TestStatusesRacePooledBuffers: readers of the whole fleet through the
// Server's pooled buffers (the fleet page, SetupReadyCheck), many at once,
// each get a buffer of their own for the length of their call, however
// they write over it, while members publish statuses. Run with -race.
func TestStatusesRacePooledBuffers(t *testing.T) {
	const n, readers, calls = 40, 8, 200
	srv := recordFleet(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { // statuses keep changing meanwhile
		c := srv.clusters.get("cluster-00001")
		for ctx.Err() == nil {
			c.probed(nil, reach.Result{At: time.Now(), Took: time.Millisecond})
			runtime.Gosched()
		}
	})
	var readersWg sync.WaitGroup
	for r := range readers {
		mark := fmt.Sprintf("reader %d", r)
		readersWg.Go(func() {
			for range calls {
				srv.withStatuses(func(statuses []ClusterStatus) {
					if len(statuses) != n {
						t.Errorf("%s: %d statuses, want %d", mark, len(statuses), n)
					}
					for i := range statuses {
						statuses[i].Name = mark
					}
					runtime.Gosched()
					for i := range statuses {
						if statuses[i].Name != mark {
							t.Errorf("%s: status %d written over by %s", mark, i, statuses[i].Name)
							return
						}
					}
				})
			}
		})
	}
	readersWg.Wait()
	cancel()
	wg.Wait()
	// What the readers wrote over was their buffers, not the Server's.
	for i, st := range srv.Statuses() {
		if want := fmt.Sprintf("cluster-%05d", i); st.Name != want {
			t.Fatalf("status %d is %q after the readers, want %q", i, st.Name, want)
		}
	}
}

// TestDeletedRecordsAreLetGo: a program that never asks for Statuses (no
// fleet page, no readiness check reading it) holds no record of the
// members it deleted beyond a bounded few: the records marked for the
// next call to catch up with are caught up with once many are marked.
// And Statuses stays exact when that happens on the way, among calls,
// builds of its view and changes of the fleet.
func TestDeletedRecordsAreLetGo(t *testing.T) {
	srv := unstartedServer(t)
	const churned = 5000
	records := make([]weak.Pointer[cluster], 0, churned)
	for i := range churned {
		name := fmt.Sprintf("churned-%05d", i)
		if err := srv.Add(config.NewNamedConfig(name, &rest.Config{Host: "https://127.0.0.1:1"})); err != nil {
			t.Fatal(err)
		}
		records = append(records, weak.Make(srv.clusters.get(name)))
		if err := srv.Delete(name); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.GC()
	held := 0
	for _, r := range records {
		if r.Value() != nil {
			held++
		}
	}
	if held > staleCatchUp {
		t.Errorf("%d of %d deleted members' records are held with no Statuses call; want at most %d", held, churned, staleCatchUp)
	}
	if st := srv.Statuses(); len(st) != 0 {
		t.Errorf("Statuses lists %d members of none", len(st))
	}

	t.Run("catching up on the way", func(t *testing.T) {
		defer func(n int) { staleCatchUp = n }(staleCatchUp)
		staleCatchUp = 2
		TestStatusesAndNamesFollowTheFleet(t)
		TestStatusesBuildWindow(t)
		TestStatusesRace(t)
	})
}
