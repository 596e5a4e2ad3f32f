package test_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// fakeClock is a clock a test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// at sets the clock to the start plus d.
func (c *fakeClock) at(start time.Time, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = start.Add(d)
}

func sec(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }

// TestOwnershipReportGapsAndOverlaps replays a run of one cluster: r1 owns
// it, leaves it dark for 2s, r2 takes over, r3 starts before r2 stops (1s
// of overlap), and r3 still runs when the run ends.
func TestOwnershipReportGapsAndOverlaps(t *testing.T) {
	clock := newFakeClock()
	t0 := clock.Now()
	rec := &test.OwnershipRecorder{Now: clock.Now}
	step := func(d float64, f func(replica, cluster string), replica string) {
		clock.at(t0, sec(d))
		f(replica, "east")
	}
	step(0, rec.Start, "r1")
	step(10, rec.Stop, "r1")
	step(12, rec.Start, "r2")
	step(15, rec.Start, "r3")
	step(16, rec.Stop, "r2")
	clock.at(t0, sec(20))
	if got := rec.Owners("east"); !slices.Equal(got, []string{"r3"}) {
		t.Errorf("Owners = %q, want [r3]", got)
	}

	rep := rec.Report(t0, t0.Add(sec(20)))
	if len(rep.Clusters) != 1 {
		t.Fatalf("report of %d clusters, want east only:\n%s", len(rep.Clusters), rep)
	}
	east := rep.Clusters[0]
	if east.Cluster != "east" || east.Starts != 3 {
		t.Errorf("cluster %s with %d starts, want east with 3", east.Cluster, east.Starts)
	}
	wantInterval(t, "dark", east.Dark, t0, [][2]float64{{10, 12}})
	wantInterval(t, "overlap", east.Overlaps, t0, [][2]float64{{15, 16}})
	if got := east.Overlaps[0].Owners; !slices.Equal(got, []string{"r2", "r3"}) {
		t.Errorf("overlap owners %q, want r2 and r3", got)
	}
	if east.DarkTotal != sec(2) || east.DarkMax != sec(2) || east.OverlapTotal != sec(1) || east.OverlapMax != sec(1) {
		t.Errorf("dark %s (max %s), overlap %s (max %s); want 2s, 2s, 1s, 1s", east.DarkTotal, east.DarkMax, east.OverlapTotal, east.OverlapMax)
	}
	if n := len(east.Owned); n != 3 || !east.Owned[2].Open || east.Owned[1].Open || !east.Owned[2].To.Equal(t0.Add(sec(20))) {
		t.Errorf("owned spans %+v: want 3, the last open until the end", east.Owned)
	}

	err := rep.Check(3 * time.Second)
	if !errors.Is(err, test.ErrOwnershipOverlap) || errors.Is(err, test.ErrOwnershipDark) {
		t.Errorf("Check(3s) = %v, want the overlap only", err)
	}
	if err == nil || !strings.Contains(err.Error(), "cluster east") || !strings.Contains(err.Error(), "r2 and r3") || !strings.Contains(err.Error(), "+15s–+16s") {
		t.Errorf("Check's error does not name the cluster, owners and interval: %v", err)
	}
	err = rep.Check(time.Second)
	if !errors.Is(err, test.ErrOwnershipOverlap) || !errors.Is(err, test.ErrOwnershipDark) {
		t.Errorf("Check(1s) = %v, want the overlap and the dark interval", err)
	}
	// A window that leaves the overlap out passes with enough darkness
	// allowed.
	if err := rec.Report(t0, t0.Add(sec(14))).Check(2 * time.Second); err != nil {
		t.Errorf("Check over the first 14s: %v", err)
	}
	for _, want := range []string{"east: 3 starts", "r1 +0s–+10s", "r3 +15s–end", "overlap +15s–+16s: r2, r3", "dark +10s–+12s"} {
		if !strings.Contains(rep.String(), want) {
			t.Errorf("report does not say %q:\n%s", want, rep)
		}
	}
}

func wantInterval(t *testing.T, what string, got []test.OwnershipInterval, t0 time.Time, want [][2]float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s intervals %+v, want %v (seconds)", what, got, want)
	}
	for i, w := range want {
		if !got[i].From.Equal(t0.Add(sec(w[0]))) || !got[i].To.Equal(t0.Add(sec(w[1]))) {
			t.Errorf("%s interval %d: %s–%s, want +%vs–+%vs", what, i, got[i].From.Sub(t0), got[i].To.Sub(t0), w[0], w[1])
		}
	}
}

// TestOwnershipReportWindow: spans are clipped to the run; one begun before
// it is not a start of the run; a cluster never owned is dark throughout;
// a handover in the same instant is neither dark nor overlap.
func TestOwnershipReportWindow(t *testing.T) {
	clock := newFakeClock()
	t0 := clock.Now()
	rec := &test.OwnershipRecorder{Now: clock.Now}
	clock.at(t0, -sec(5))
	rec.Start("r1", "east")
	clock.at(t0, sec(4))
	rec.Stop("r1", "east")
	rec.Start("r2", "east") // the same instant
	clock.at(t0, sec(30))
	rec.Stop("r2", "east") // after the run

	rep := rec.Report(t0, t0.Add(sec(10)), "never", "east", "east")
	if len(rep.Clusters) != 2 || rep.Clusters[0].Cluster != "east" || rep.Clusters[1].Cluster != "never" {
		t.Fatalf("clusters of the report:\n%s\nwant east and never, once each", rep)
	}
	east, never := rep.Clusters[0], rep.Clusters[1]
	if east.Starts != 1 || len(east.Dark) != 0 || len(east.Overlaps) != 0 {
		t.Errorf("east: %d starts, dark %v, overlaps %v; want 1 start and neither", east.Starts, east.Dark, east.Overlaps)
	}
	if len(east.Owned) != 2 || !east.Owned[0].From.Equal(t0) || !east.Owned[1].Open || !east.Owned[1].To.Equal(t0.Add(sec(10))) {
		t.Errorf("east owned %+v: want r1 clipped to the run's start, r2 open to its end", east.Owned)
	}
	wantInterval(t, "never's dark", never.Dark, t0, [][2]float64{{0, 10}})
	if never.Starts != 0 || never.DarkMax != sec(10) {
		t.Errorf("never: %d starts, dark max %s", never.Starts, never.DarkMax)
	}
	if err := rep.Check(9 * time.Second); !errors.Is(err, test.ErrOwnershipDark) || !strings.Contains(err.Error(), "cluster never") || strings.Contains(err.Error(), "cluster east") {
		t.Errorf("Check = %v, want never's darkness only", err)
	}
	if err := rec.Report(t0, t0.Add(sec(10)), "east").Check(0); err != nil {
		t.Errorf("east alone: %v", err)
	}
	// A run after every span: dark.
	if d := rec.Report(t0.Add(sec(40)), t0.Add(sec(41)), "east").Clusters[0].DarkTotal; d != time.Second {
		t.Errorf("dark after every span: %s, want 1s", d)
	}
}

// TestOwnershipTwiceByOneReplica: two Managers of one name in one replica
// overlap as two replicas would, and a Stop ends the earliest.
func TestOwnershipTwiceByOneReplica(t *testing.T) {
	clock := newFakeClock()
	t0 := clock.Now()
	rec := &test.OwnershipRecorder{Now: clock.Now}
	rec.Start("r1", "east")
	clock.at(t0, sec(1))
	rec.Start("r1", "east")
	clock.at(t0, sec(3))
	rec.Stop("r1", "east")
	if got := rec.Owners("east"); !slices.Equal(got, []string{"r1"}) {
		t.Errorf("Owners = %q, want r1 once", got)
	}
	clock.at(t0, sec(4))
	rep := rec.Report(t0, t0.Add(sec(4)))
	east := rep.Clusters[0]
	wantInterval(t, "overlap", east.Overlaps, t0, [][2]float64{{1, 3}})
	if got := east.Overlaps[0].Owners; !slices.Equal(got, []string{"r1", "r1"}) {
		t.Errorf("overlap owners %q, want r1 twice", got)
	}
	if !east.Owned[0].To.Equal(t0.Add(sec(3))) || !east.Owned[1].Open {
		t.Errorf("owned %+v: want the first span stopped at +3s, the second open", east.Owned)
	}
}

// TestOwnershipOverlapOfThreeMerges: an overlap whose owners change
// without ever falling to one is one interval with all of them.
func TestOwnershipOverlapOfThreeMerges(t *testing.T) {
	clock := newFakeClock()
	t0 := clock.Now()
	rec := &test.OwnershipRecorder{Now: clock.Now}
	for _, e := range []struct {
		at      float64
		start   bool
		replica string
	}{{0, true, "a"}, {1, true, "b"}, {2, false, "a"}, {2, true, "c"}, {3, false, "b"}, {5, false, "c"}} {
		clock.at(t0, sec(e.at))
		if e.start {
			rec.Start(e.replica, "east")
		} else {
			rec.Stop(e.replica, "east")
		}
	}
	east := rec.Report(t0, t0.Add(sec(6))).Clusters[0]
	wantInterval(t, "overlap", east.Overlaps, t0, [][2]float64{{1, 3}})
	if got := east.Overlaps[0].Owners; !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("overlap owners %q, want a, b and c", got)
	}
	wantInterval(t, "dark", east.Dark, t0, [][2]float64{{5, 6}})
}

func TestOwnershipStopWithoutStart(t *testing.T) {
	rec := &test.OwnershipRecorder{}
	from := time.Now()
	rec.Start("r1", "east")
	rec.Stop("r1", "east")
	rec.Stop("r1", "east")
	err := rec.Report(from, time.Now()).Check(time.Hour)
	if !errors.Is(err, test.ErrOwnershipUnmatched) || !strings.Contains(err.Error(), `replica "r1", cluster "east"`) {
		t.Errorf("Check = %v, want the unmatched stop of r1 in east", err)
	}
}

// TestOwnershipConcurrent records from many goroutines while reports are
// read (run with -race).
func TestOwnershipConcurrent(t *testing.T) {
	rec := &test.OwnershipRecorder{}
	from := time.Now()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			replica, cluster := fmt.Sprint("r", i), fmt.Sprint("c", i%3)
			for range 200 {
				rec.Start(replica, cluster)
				_ = rec.Owners(cluster)
				rec.Stop(replica, cluster)
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			_ = rec.Report(from, time.Now()).String()
		}
	})
	wg.Wait()
	rep := rec.Report(from, time.Now())
	starts := 0
	for _, c := range rep.Clusters {
		starts += c.Starts
		if len(rec.Owners(c.Cluster)) != 0 {
			t.Errorf("%s still owned after every Stop", c.Cluster)
		}
	}
	if len(rep.Clusters) != 3 || starts != 8*200 || len(rep.Unmatched) != 0 {
		t.Errorf("%d clusters, %d starts, %d unmatched; want 3, 1600, 0", len(rep.Clusters), starts, len(rep.Unmatched))
	}
}

func TestOwnershipRunnable(t *testing.T) {
	rec := &test.OwnershipRecorder{}
	ctx, cancel := context.WithCancel(known.WithCluster(context.Background(), "east"))
	done := make(chan error, 1)
	go func() { done <- rec.Runnable("r1", "").Start(ctx) }()
	test.Eventually(t, 5*time.Second, "r1 owns east", func() bool { return slices.Equal(rec.Owners("east"), []string{"r1"}) })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := rec.Owners("east"); len(got) != 0 {
		t.Errorf("owners after the runnable returned: %q", got)
	}

	// A name given wins over the context's; none at all is an error.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if err := rec.Runnable("r1", "west").Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rec.Runnable("r1", "").Start(ctx); !errors.Is(err, test.ErrNoClusterName) {
		t.Errorf("Start without a cluster: %v, want ErrNoClusterName", err)
	}
	if rep := rec.Report(time.Now().Add(-time.Minute), time.Now()); len(rep.Clusters) != 2 || rep.Clusters[1].Starts != 1 {
		t.Errorf("report:\n%s\nwant east and west started once each", rep)
	}
}

// slowStop is a runnable that takes a while to return once its context
// ends, like a controller finishing a Reconcile.
type slowStop struct {
	mu       sync.Mutex
	returned time.Time
}

func (s *slowStop) Start(ctx context.Context) error {
	<-ctx.Done()
	time.Sleep(500 * time.Millisecond) // the work in flight
	s.mu.Lock()
	defer s.mu.Unlock()
	s.returned = time.Now()
	return nil
}

// TestOwnershipRecorderOnServers hooks the recorder into two Servers (two
// replicas in one process) that both run cluster one: the report shows
// their overlap, and a replica's ownership ends once its member Manager
// has stopped, not when it begins to stop.
func TestOwnershipRecorderOnServers(t *testing.T) {
	rec := &test.OwnershipRecorder{}
	from := time.Now()
	stops := map[string]func() error{}
	slow := &slowStop{}
	for _, replica := range []string{"r1", "r2"} {
		srv, err := server.NewServer(fleet.Cluster("two").Config, ctrl.Options{
			Logger:                 test.Logger(t),
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
		})
		if err != nil {
			t.Fatal(err)
		}
		srv.AddReconcilerSetup(rec.Setup(replica))
		if replica == "r1" {
			srv.AddReconcilerSetup(func(mgr ctrl.Manager) error { return mgr.Add(slow) })
		}
		if err := srv.Add(fleet.Cluster("one").Named); err != nil {
			t.Fatal(err)
		}
		stops[replica] = test.Run(t, srv)
	}
	test.Eventually(t, 30*time.Second, "both replicas run cluster one", func() bool {
		return slices.Equal(rec.Owners("one"), []string{"r1", "r2"})
	})
	if err := stops["r1"](); err != nil {
		t.Fatal(err)
	}
	// Server.Start returned once r1's member had stopped: its ownership
	// has ended by then (the recorder learns it a moment later).
	test.Eventually(t, 5*time.Second, "r2 alone runs cluster one", func() bool {
		return slices.Equal(rec.Owners("one"), []string{"r2"})
	})
	rep := rec.Report(from, time.Now(), "one")
	if err := rep.Check(time.Minute); !errors.Is(err, test.ErrOwnershipOverlap) {
		t.Fatalf("Check = %v, want the overlap of r1 and r2", err)
	}
	one := rep.Clusters[0]
	if one.Starts != 2 || len(one.Overlaps) != 1 || !slices.Equal(one.Overlaps[0].Owners, []string{"r1", "r2"}) {
		t.Errorf("report:\n%s\nwant 2 starts and one overlap of r1 and r2", rep)
	}
	slow.mu.Lock()
	returned := slow.returned
	slow.mu.Unlock()
	if returned.IsZero() {
		t.Fatal("r1's slow runnable never returned")
	}
	for _, o := range one.Owned {
		if o.Owners[0] == "r1" && o.To.Before(returned) {
			t.Errorf("r1's ownership ended %s before its Manager's last runnable returned", returned.Sub(o.To))
		}
	}
}

// fakeMember is as much of a Server's member Manager as Setup uses.
type fakeMember struct {
	ctrl.Manager
	stopped chan struct{}
	added   []manager.Runnable
}

func (m *fakeMember) Add(r manager.Runnable) error {
	m.added = append(m.added, r)
	return nil
}

func (m *fakeMember) Stopped() <-chan struct{} { return m.stopped }

// TestOwnershipEndsAsSeenOnceTheMemberStopped: Owners and Report called
// right after a member Manager has stopped see its ownership ended.
func TestOwnershipEndsAsSeenOnceTheMemberStopped(t *testing.T) {
	rec := &test.OwnershipRecorder{}
	from := time.Now()
	for i := range 100 {
		m := &fakeMember{stopped: make(chan struct{})}
		if err := rec.Setup("r1")(m); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(known.WithCluster(t.Context(), "east"))
		errc := make(chan error, 1)
		go func() { errc <- m.added[0].Start(ctx) }()
		test.Eventually(t, 5*time.Second, "r1 owns east", func() bool { return slices.Equal(rec.Owners("east"), []string{"r1"}) })
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if got := rec.Owners("east"); !slices.Equal(got, []string{"r1"}) {
			t.Fatalf("round %d: once the runnable returned, before its Manager stopped, east is owned by %q, want r1", i, got)
		}
		close(m.stopped)
		if i%2 == 0 {
			if got := rec.Owners("east"); len(got) != 0 {
				t.Fatalf("round %d: right after the Manager stopped, east is owned by %q", i, got)
			}
			continue
		}
		rep := rec.Report(from, time.Now().Add(time.Minute), "east")
		for _, o := range rep.Clusters[0].Owned {
			if o.Open {
				t.Fatalf("round %d: right after the Manager stopped, the report has a span still open:\n%s", i, rep)
			}
		}
	}
}

// TestOwnershipCheckFailsARunThatEndsBeforeItStarts: from and to swapped
// check nothing, and Check says so instead of passing.
func TestOwnershipCheckFailsARunThatEndsBeforeItStarts(t *testing.T) {
	clock := newFakeClock()
	t0 := clock.Now()
	rec := &test.OwnershipRecorder{Now: clock.Now}
	rec.Start("r1", "east")
	rec.Start("r2", "east") // two owners from the start
	if err := rec.Report(t0, t0.Add(sec(10))).Check(time.Second); !errors.Is(err, test.ErrOwnershipOverlap) {
		t.Fatalf("Check of the run: %v, want an overlap", err)
	}
	if err := rec.Report(t0.Add(sec(10)), t0).Check(time.Second); err == nil {
		t.Fatal("Check of a run that ends before it starts passed")
	}
}
