package sample_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/sample/internal/reconciler"
	"github.com/mccr-dev/mccr/test"
)

// timing is one replica's lease timing, as its flags set it.
type timing struct{ lease, renew, retry time.Duration }

var (
	// timingA is the run's own (newShardRun's flags).
	timingA = timing{shardLease, shardRenew, shardRetry}
	// timingB is what a rolling update changes it to: every value
	// different, the lease twice as long.
	timingB = timing{8 * time.Second, 5 * time.Second, time.Second}
)

func (tm timing) String() string {
	return fmt.Sprintf("lease %s/renew %s/retry %s", tm.lease, tm.renew, tm.retry)
}

// flags override the run's timing; the members' graceful shutdown stays
// under lease − renew, as NewServer demands.
func (tm timing) flags() []string {
	return []string{
		"--lease-duration", tm.lease.String(),
		"--renew-deadline", tm.renew.String(),
		"--retry-period", tm.retry.String(),
		"--graceful-shutdown-timeout", (tm.lease - tm.renew - 500*time.Millisecond).String(),
	}
}

// TestShardedRollingUpdate replaces three replicas of sample/sharded one
// by one, as a Deployment's rolling update does, by replicas whose lease
// timing differs in every value, while ConfigMaps are created in every
// cluster all along:
//
//   - surge order (maxSurge 1, maxUnavailable 0): the new replica, with
//     timing B, starts; once its readiness probe answers, the old one gets
//     SIGTERM;
//   - then back to timing A in the other order (maxSurge 0,
//     maxUnavailable 1): the old replica gets SIGTERM and its replacement
//     starts at once, while the old one is still handing over.
//
// Over the whole run no two replicas run one cluster at once, and every
// ConfigMap created is reconciled in its cluster; in every step each
// cluster runs nowhere for at most handoverBound and starts at most twice,
// unless the host answered a replica's renewals too slowly meanwhile (a
// busy machine), which the figures then say.
//
// Under -short the fleet has 6 cluster names instead of 12.
func TestShardedRollingUpdate(t *testing.T) {
	f := sharedFleet(t)
	n, rate := 12, 10
	if testing.Short() {
		n, rate = 6, 6
	}
	s := newShardRun(t, f, n)
	s.timelineOnFailure()
	live := []string{"r1", "r2", "r3"}
	for _, id := range live {
		s.startReplica(id, timingA)
	}
	s.settle(live...)
	s.reconciled("before")

	load := s.startLoad(rate)
	steps := make([]handoverStep, 0, 6)
	replace := func(old, repl string) {
		live[slices.Index(live, old)] = repl
	}
	for i, old := range []string{"r1", "r2", "r3"} {
		repl := fmt.Sprintf("b%d", i+1)
		st := handoverStep{name: fmt.Sprintf("surge: %s (%s) up and ready, then %s SIGTERM", repl, timingB, old),
			bound: handoverBound, from: time.Now()}
		probe := test.FreeAddress(t)
		s.startReplica(repl, timingB, "--health-probe-bind-address", probe)
		httpGet(t, "http://"+probe+"/readyz")
		s.replicas[old].terminate()
		replace(old, repl)
		s.settle(live...)
		st.settled = time.Now()
		steps = append(steps, st)
	}
	for i, old := range []string{"b1", "b2", "b3"} {
		repl := fmt.Sprintf("c%d", i+1)
		st := handoverStep{name: fmt.Sprintf("maxSurge=0: %s SIGTERM, then %s (%s) up at once", old, repl, timingA),
			bound: handoverBound, from: time.Now()}
		wait := s.sigterm(old)
		s.startReplica(repl, timingA)
		wait()
		replace(old, repl)
		s.settle(live...)
		st.settled = time.Now()
		steps = append(steps, st)
	}
	load.finish()
	s.waitLoadReconciled(load)
	s.reconciled("after-rolling")

	end := time.Now()
	for _, id := range live {
		s.replicas[id].terminate()
	}
	s.checkSteps(fmt.Sprintf("rolling update (%d clusters)", n), steps, end)
}

// TestShardedKillUnderLoad kills replicas of sample/sharded with SIGKILL
// while ConfigMaps are created in every cluster at a steady rate: first
// one whose Lease declares timing B (8 s) among two with timing A (4 s),
// then one of timing A. Each victim's clusters run elsewhere no sooner
// than its own declared lease duration allows (less the renewals it may
// have missed) and, while the host answers the survivors' renewals in
// time, no later than that and takeoverSlack, and the others' clusters do
// not restart; no two replicas ever run one cluster at once; every
// ConfigMap created, also those created while their cluster ran nowhere,
// is reconciled in its cluster.
//
// Under -short the fleet has 6 cluster names instead of 12.
func TestShardedKillUnderLoad(t *testing.T) {
	f := sharedFleet(t)
	n, rate := 12, 20
	if testing.Short() {
		n, rate = 6, 12
	}
	s := newShardRun(t, f, n)
	s.timelineOnFailure()
	timings := map[string]timing{"r1": timingA, "r2": timingB, "r3": timingA}
	live := []string{"r1", "r2", "r3"}
	for _, id := range live {
		s.startReplica(id, timings[id])
	}
	owners := s.settle(live...)
	s.reconciled("before")

	load := s.startLoad(rate)
	// Two seconds' worth of load before the first kill, and after each
	// takeover.
	load.waitCreated(load.count() + 2*rate)
	victims := []string{"r2", "r1"}
	steps := make([]handoverStep, 0, len(victims))
	for _, victim := range victims {
		tm := timings[victim]
		var lost []string
		for name, r := range owners {
			if r == victim {
				lost = append(lost, name)
			}
		}
		slices.Sort(lost)
		st := handoverStep{name: fmt.Sprintf("kill -9 of %s (%s) running %d clusters", victim, tm, len(lost)),
			bound: tm.lease + takeoverSlack, from: time.Now()}
		s.kill(victim)
		// The victim ran nothing from the signal on; on a busy machine the
		// wait for a race-built process to be reaped ends up to a second
		// later, which would shorten its clusters' dark time.
		reaped := s.deadAt[victim].Sub(st.from)
		s.deadAt[victim] = st.from
		live = slices.DeleteFunc(live, func(id string) bool { return id == victim })
		before := owners
		owners = s.settle(live...)
		st.settled = time.Now()
		steps = append(steps, st)
		// While the host answers the survivors' renewals in time, a
		// cluster the assignment leaves where it was keeps running, and
		// the victim's move within the bound; a survivor that could not
		// renew stops its clusters, as it must.
		trouble := s.renewalTrouble(st.from, st.settled)
		report := t.Errorf
		if len(trouble) > 0 {
			t.Logf("figure: sharded kill under load: kill -9 of %s: the host answered renewals too slowly (%s); restarts and the upper bound are not checked",
				victim, strings.Join(trouble, ", "))
			report = t.Logf
		}
		for _, name := range s.names {
			if before[name] != owners[name] {
				continue
			}
			if at, ok := s.firstStart(name, st.from, ""); ok {
				report("%s, on %s before and after the kill of %s, started again at %s", name, owners[name], victim, at.Format("15:04:05.000"))
			}
		}

		// The survivors must judge the victim by the duration its Lease
		// declares, not by their own: its last renewal was at most a
		// retry period (and a slow write) before the kill.
		earliest := tm.lease - tm.retry - time.Second
		takeovers := make([]time.Duration, 0, len(lost))
		for _, name := range lost {
			at, ok := s.firstStart(name, st.from, victim)
			if !ok {
				t.Fatalf("%s: no witness start elsewhere after the kill of %s", name, victim)
			}
			d := at.Sub(st.from)
			takeovers = append(takeovers, d)
			if d < earliest {
				t.Errorf("%s started elsewhere %s after the kill of %s, before its declared lease %s less a renewal (%s) could have run out",
					name, d.Round(time.Millisecond), victim, tm.lease, earliest)
			}
			if d > st.bound {
				report("%s started elsewhere %s after the kill of %s, over its lease %s + %s", name, d.Round(time.Millisecond), victim, tm.lease, takeoverSlack)
			}
		}
		dark := load.createdDark(lost, st.from, func(name string) time.Time { at, _ := s.firstStart(name, st.from, victim); return at })
		t.Logf("figure: sharded kill under load: takeover after kill -9 of %s (%s): p50 %s, max %s over %d clusters (allowed %s–%s); %d ConfigMaps created in them while they ran nowhere; reaped %s after SIGKILL",
			victim, tm, median(takeovers).Round(time.Millisecond), longest(takeovers).Round(time.Millisecond), len(lost),
			earliest, st.bound, dark, reaped.Round(time.Millisecond))
		load.waitCreated(load.count() + 2*rate)
	}
	load.finish()
	s.waitLoadReconciled(load)

	end := time.Now()
	s.replicas["r3"].terminate()
	s.checkSteps(fmt.Sprintf("kill under load (%d clusters, %d ConfigMaps/s)", n, rate), steps, end)
}

// renewalTrouble lists the times, overlapping [from, until), in which a
// replica could not renew its own Lease: from its line "cannot renew this
// replica's Lease" to "renewing this replica's Lease again" (or its end).
// The host answered too slowly then (on a busy machine, a request
// timeout); a replica stops its clusters once that lasts its renew
// deadline, and takes none meanwhile, so handover bounds do not hold.
func (s *shardRun) renewalTrouble(from, until time.Time) []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(s.replicas)) {
		var begin time.Time
		add := func(end time.Time) {
			if begin.IsZero() || !begin.Before(until) || (!end.IsZero() && end.Before(from)) {
				return
			}
			stop := "its end"
			if !end.IsZero() {
				stop = end.Format("15:04:05.000")
			}
			out = append(out, fmt.Sprintf("%s %s–%s", id, begin.Format("15:04:05.000"), stop))
		}
		for line := range strings.Lines(s.replicas[id].out.String()) {
			if !strings.Contains(line, "this replica's Lease") {
				continue
			}
			var rec struct {
				Time time.Time `json:"time"`
				Msg  string    `json:"msg"`
			}
			if json.Unmarshal([]byte(line), &rec) != nil {
				continue
			}
			switch {
			case strings.HasPrefix(rec.Msg, "sharding: cannot renew this replica's Lease") && begin.IsZero():
				begin = rec.Time
			case strings.HasPrefix(rec.Msg, "sharding: renewing this replica's Lease again"):
				add(rec.Time)
				begin = time.Time{}
			}
		}
		add(time.Time{})
	}
	return out
}

// startReplica starts replica id with timing tm, logging at verbosity 1:
// the sharding lines there (letting go, released, why a cluster assigned
// here does not run yet) are what a failure's timeline needs.
func (s *shardRun) startReplica(id string, tm timing, extra ...string) {
	s.t.Helper()
	s.startWith(id, slices.Concat(tm.flags(), []string{"--verbosity", "1"}, extra)...)
}

// timelineOnFailure logs, if the test fails, what every replica said
// about ownership (witness and sharding lines, errors) in time order: the
// replicas' own tails are mostly reconciles.
func (s *shardRun) timelineOnFailure() {
	s.t.Cleanup(func() {
		if !s.t.Failed() {
			return
		}
		type entry struct {
			at   time.Time
			line string
		}
		var all []entry
		for id, p := range s.replicas {
			for line := range strings.Lines(p.out.String()) {
				var rec struct {
					Time  time.Time `json:"time"`
					Level string    `json:"level"`
					Msg   string    `json:"msg"`
				}
				if json.Unmarshal([]byte(line), &rec) != nil {
					continue
				}
				if strings.HasPrefix(rec.Msg, "witness") || strings.HasPrefix(rec.Msg, "sharding") ||
					rec.Level == "ERROR" || rec.Level == "WARN" {
					all = append(all, entry{rec.Time, id + " " + strings.TrimSpace(line)})
				}
			}
		}
		slices.SortStableFunc(all, func(a, b entry) int { return a.at.Compare(b.at) })
		var b strings.Builder
		for _, e := range all {
			b.WriteString(e.line)
			b.WriteByte('\n')
		}
		s.t.Logf("ownership timeline of every replica:\n%s", b.String())
	})
}

// handoverStep is one step of a run that moves clusters between replicas:
// from when it began until the next step began (or the run's end).
type handoverStep struct {
	name    string
	from    time.Time
	settled time.Time     // every cluster ran on its replica again
	bound   time.Duration // how long one cluster may run nowhere
}

// checkSteps reads every replica's witness lines once the run is over,
// logs each step's figures and fails the test on what measureStep finds;
// then checks the whole run for overlaps.
func (s *shardRun) checkSteps(run string, steps []handoverStep, end time.Time) {
	s.t.Helper()
	spans := s.spans()
	for i, st := range steps {
		until := end
		if i+1 < len(steps) {
			until = steps[i+1].from
		}
		fig := measureStep(s.names, spans, st, until)
		trouble := s.renewalTrouble(st.from, until)
		s.t.Logf("figure: sharded %s: step %q: %d starts of %d clusters (%d after a gap), dark p50 %s max %s (bound %s), overlaps %d, starts per cluster max %d, settled %s after the step began",
			run, st.name, fig.starts, fig.clusters, len(fig.dark), median(fig.dark).Round(time.Millisecond),
			longest(fig.dark).Round(time.Millisecond), st.bound, len(fig.overlaps), fig.most, st.settled.Sub(st.from).Round(time.Millisecond))
		for _, o := range fig.overlaps {
			s.t.Errorf("%s, step %q: %s", run, st.name, o)
		}
		if len(trouble) > 0 && len(fig.problems) > 0 {
			s.t.Logf("figure: sharded %s: step %q: the host answered renewals too slowly (%s); the step's bounds are not checked: %s",
				run, st.name, strings.Join(trouble, ", "), strings.Join(fig.problems, "; "))
			continue
		}
		for _, p := range fig.problems {
			s.t.Errorf("%s, step %q: %s", run, st.name, p)
		}
	}
	overlaps := s.overlaps()
	s.t.Logf("figure: sharded %s: intervals where two replicas ran one cluster at once over the whole run: %d (of %d intervals)",
		run, len(overlaps), len(spans))
	for _, o := range overlaps {
		s.t.Errorf("%s: two replicas ran a cluster at once: %s", run, o)
	}
}

// stepFigure is what one step did to the clusters started in it.
type stepFigure struct {
	starts, clusters int             // starts in the step, and of how many clusters
	most             int             // most starts of one cluster
	dark             []time.Duration // per start after a run elsewhere: how long the cluster ran nowhere
	overlaps         []string        // starts while another run of the cluster went on
	problems         []string        // each bound broken, said in full
}

// measureStep looks at every start of a cluster of names in [st.from,
// until) among spans (sorted by start): whether another replica still ran
// it (never), how long the cluster ran nowhere before it (at most
// st.bound), and how often it started (at most twice: moved away and
// back, or on to a third replica). The bounds hold while the host answers
// the replicas' renewals in time.
func measureStep(names []string, spans []span, st handoverStep, until time.Time) stepFigure {
	var fig stepFigure
	for _, name := range names {
		var before []span
		starts := 0
		for _, sp := range spans {
			if sp.cluster != name {
				continue
			}
			if sp.start.Before(st.from) || !sp.start.Before(until) {
				before = append(before, sp)
				continue
			}
			starts++
			var last time.Time
			overlapped := false
			for _, b := range before {
				if b.stop.IsZero() || b.stop.After(sp.start) {
					overlapped = true
					fig.overlaps = append(fig.overlaps, fmt.Sprintf("two replicas ran a cluster at once: %s and %s", b, sp))
					continue
				}
				last = later(last, b.stop)
			}
			if !overlapped && !last.IsZero() {
				d := sp.start.Sub(last)
				fig.dark = append(fig.dark, d)
				if d > st.bound {
					fig.problems = append(fig.problems, fmt.Sprintf("%s ran nowhere for %s before it started on %s, over %s",
						name, d.Round(time.Millisecond), sp.replica, st.bound))
				}
			}
			before = append(before, sp)
		}
		if starts == 0 {
			continue
		}
		fig.starts += starts
		fig.clusters++
		fig.most = max(fig.most, starts)
		if starts > 2 {
			fig.problems = append(fig.problems, fmt.Sprintf("%s started %d times, want at most 2", name, starts))
		}
	}
	return fig
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(ds))
	return sorted[len(sorted)/2]
}

// sigterm sends SIGTERM to replica id and returns a func that waits, as
// terminate does, until it exited 0 without a race report; in between the
// caller may go on, as a Deployment creates a replacement while the old
// pod still terminates.
func (s *shardRun) sigterm(id string) (wait func()) {
	s.t.Helper()
	p := s.replicas[id]
	if p.exited() {
		s.t.Fatalf("%s exited early: %v", p.name, p.err)
	}
	begin := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		s.t.Fatal(err)
	}
	return func() {
		s.t.Helper()
		select {
		case <-p.done:
		case <-time.After(stopBound - time.Since(begin)):
			s.t.Fatalf("%s still running %s after SIGTERM", p.name, stopBound)
		}
		if p.err != nil {
			s.t.Fatalf("%s exited with %v after SIGTERM, want exit code 0", p.name, p.err)
		}
		if strings.Contains(p.out.String(), "DATA RACE") {
			s.t.Fatalf("%s reported a data race", p.name)
		}
		s.t.Logf("%s exited 0, %s after SIGTERM", p.name, time.Since(begin).Round(time.Millisecond))
	}
}

// fleetLoad creates opted-in ConfigMaps in every cluster of a run at a
// steady rate until finish.
type fleetLoad struct {
	t     *testing.T
	begin time.Time
	stop  chan struct{}
	wg    sync.WaitGroup
	// clients reach the members without client-go's default rate limit
	// (5/s), which would cap the load below what the test asks for.
	clients map[string]client.Client // member name → client

	mu      sync.Mutex
	created map[string][]loadObject // cluster name → what was created there
	total   int
	failed  []string
	ended   time.Time
}

type loadObject struct {
	name string
	at   time.Time // when the create returned
}

// startLoad creates perSecond ConfigMaps a second over the fleet: each
// cluster gets its share at a steady pace, the clusters' turns spread
// over the interval.
func (s *shardRun) startLoad(perSecond int) *fleetLoad {
	s.t.Helper()
	l := &fleetLoad{t: s.t, begin: time.Now(), stop: make(chan struct{}), clients: map[string]client.Client{},
		created: map[string][]loadObject{}}
	for _, m := range s.memberOf {
		if l.clients[m] != nil {
			continue
		}
		cfg := rest.CopyConfig(sharedFleet(s.t).Cluster(m).Config)
		cfg.QPS, cfg.Burst = -1, 0
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			s.t.Fatal(err)
		}
		s.t.Cleanup(hc.CloseIdleConnections)
		c, err := client.New(cfg, client.Options{HTTPClient: hc})
		if err != nil {
			s.t.Fatal(err)
		}
		l.clients[m] = c
	}
	every := time.Duration(float64(time.Second) * float64(len(s.names)) / float64(perSecond))
	for i, cluster := range s.names {
		c := l.clients[s.memberOf[cluster]]
		offset := every * time.Duration(i) / time.Duration(len(s.names))
		l.wg.Go(func() {
			select {
			case <-l.stop:
				return
			case <-time.After(offset):
			}
			tick := time.NewTicker(every)
			defer tick.Stop()
			for seq := 0; ; seq++ {
				name := fmt.Sprintf("load-%s-%d", s.run, seq)
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cluster, Name: name,
					Labels: map[string]string{reconciler.EnabledLabel: "true"}}, Data: map[string]string{"k": "v"}}
				ctx, cancel := context.WithTimeout(context.Background(), patience)
				err := c.Create(ctx, cm)
				cancel()
				l.mu.Lock()
				if err != nil {
					l.failed = append(l.failed, fmt.Sprintf("creating ConfigMap %s/%s in %s: %v", cluster, name, cluster, err))
				} else {
					l.created[cluster] = append(l.created[cluster], loadObject{name, time.Now()})
					l.total++
				}
				l.mu.Unlock()
				select {
				case <-l.stop:
					return
				case <-tick.C:
				}
			}
		})
	}
	return l
}

func (l *fleetLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// waitCreated waits until at least n ConfigMaps were created.
func (l *fleetLoad) waitCreated(n int) {
	l.t.Helper()
	eventually(l.t, fmt.Sprintf("the load to have created %d ConfigMaps", n), func() (bool, error) {
		return l.count() >= n, nil
	})
}

// finish stops the load and fails the test if any create failed: the
// members' API servers are not what is under test.
func (l *fleetLoad) finish() {
	l.t.Helper()
	close(l.stop)
	l.wg.Wait()
	l.ended = time.Now()
	for _, f := range l.failed {
		l.t.Error(f)
	}
}

// createdDark counts the ConfigMaps created in clusters after since and
// before each cluster's started(cluster).
func (l *fleetLoad) createdDark(clusters []string, since time.Time, started func(cluster string) time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, cluster := range clusters {
		until := started(cluster)
		for _, o := range l.created[cluster] {
			if o.at.After(since) && o.at.Before(until) {
				n++
			}
		}
	}
	return n
}

// waitLoadReconciled waits until every ConfigMap the load created is
// stamped with its cluster's name, read straight from the members' API
// servers, and logs how long after the load stopped that took.
func (s *shardRun) waitLoadReconciled(l *fleetLoad) {
	s.t.Helper()
	pending := map[string]map[string]bool{}
	for cluster, objs := range l.created {
		pending[cluster] = map[string]bool{}
		for _, o := range objs {
			pending[cluster][o.name] = true
		}
	}
	eventually(s.t, fmt.Sprintf("the %d ConfigMaps of the load to be stamped", l.total), func() (bool, error) {
		left := 0
		for cluster, names := range pending {
			if len(names) == 0 {
				continue
			}
			var list corev1.ConfigMapList
			if err := l.clients[s.memberOf[cluster]].List(s.t.Context(), &list, client.InNamespace(cluster),
				client.MatchingLabels{reconciler.EnabledLabel: "true"}); err != nil {
				return false, fmt.Errorf("listing ConfigMaps in %s: %w", cluster, err)
			}
			for _, cm := range list.Items {
				if !names[cm.Name] {
					continue
				}
				switch got := cm.Annotations[reconciler.SeenInAnnotation]; got {
				case "":
				case cluster:
					delete(names, cm.Name)
				default:
					return false, fmt.Errorf("ConfigMap %s/%s in %s stamped %q", cluster, cm.Name, cluster, got)
				}
			}
			left += len(names)
		}
		return left == 0, nil
	})
	s.t.Logf("figure: sharded load: %d ConfigMaps created over %d clusters in %s (%.1f/s); all reconciled %s after the load stopped",
		l.total, len(s.names), l.ended.Sub(l.begin).Round(time.Millisecond),
		float64(l.total)/l.ended.Sub(l.begin).Seconds(), time.Since(l.ended).Round(time.Millisecond))
}

// TestMeasureStep feeds measureStep runs of clusters that break each
// invariant, so that the fleet tests above can be trusted to see them.
func TestMeasureStep(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	st := handoverStep{name: "step", from: at(0), bound: 2 * time.Second}
	spans := []span{
		{"clean", "r1", at(-5000), at(100)},
		{"clean", "r2", at(400), time.Time{}},
		{"overlap", "r1", at(-5000), at(900)},
		{"overlap", "r2", at(800), time.Time{}},
		{"dark", "r1", at(-5000), at(100)},
		{"dark", "r2", at(2200), time.Time{}},
		{"thrice", "r1", at(-5000), at(10)},
		{"thrice", "r2", at(20), at(30)},
		{"thrice", "r3", at(40), at(50)},
		{"thrice", "r2", at(60), time.Time{}},
		{"later", "r1", at(-5000), at(9000)},
		{"later", "r2", at(9100), time.Time{}},
		{"untouched", "r1", at(-5000), time.Time{}},
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start.Compare(b.start) })
	fig := measureStep([]string{"clean", "overlap", "dark", "thrice", "later", "untouched"}, spans, st, at(5000))
	if fig.starts != 6 || fig.clusters != 4 || fig.most != 3 || len(fig.overlaps) != 1 {
		t.Errorf("starts %d of %d clusters, most %d, overlaps %d; want 6 of 4, 3, 1", fig.starts, fig.clusters, fig.most, len(fig.overlaps))
	}
	if got, want := longest(fig.dark), 2100*time.Millisecond; got != want {
		t.Errorf("longest dark time %s, want %s", got, want)
	}
	if !strings.Contains(strings.Join(fig.overlaps, ""), "overlap on r1") {
		t.Errorf("overlaps %q, want the one of cluster overlap", fig.overlaps)
	}
	for _, want := range []string{"dark ran nowhere for 2.1s", "thrice started 3 times"} {
		if !slices.ContainsFunc(fig.problems, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("no problem mentions %q in %q", want, fig.problems)
		}
	}
	if len(fig.problems) != 2 {
		t.Errorf("problems %q, want 2", fig.problems)
	}
}
