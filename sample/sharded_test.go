package sample_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/internal/shard"
	"github.com/mccr-dev/mccr/test"
)

// The sharded replicas' lease timing: short, so that a dead replica's
// clusters move within seconds.
const (
	shardLease = 4 * time.Second
	shardRenew = 3 * time.Second
	shardRetry = 500 * time.Millisecond
	// takeoverSlack is what a takeover after kill -9 may take beyond the
	// lease duration: noticing the expiry, taking the Leases, starting the
	// Managers.
	takeoverSlack = 5 * time.Second
	// handoverBound bounds, per cluster, the time nobody runs it when its
	// replica stops gracefully (the rolling update's steps).
	handoverBound = 2 * time.Second
	// releasedBound bounds the same in TestSharded, whose handovers are
	// shown to be releases by the takers' own lines (no takeover names the
	// replica that let go): a sanity bound on a loaded machine, where
	// sixteen members starting at once under the race detector take a
	// good part of handoverBound.
	releasedBound = 5 * time.Second
)

// TestSharded runs sample/sharded as replicas (subprocesses) sharing a fleet
// of cluster names spread over the members' API servers, and reads from
// every replica's witness lines which replica ran each cluster when:
//
//   - three replicas split the fleet, none above ceil(1.25 × average);
//   - one killed with SIGKILL loses its clusters to the others within the
//     lease duration and a few seconds;
//   - a fourth replica joining (the third live one) moves about a third of
//     the clusters, what the assignment moves and no more, each released
//     by its replica and taken within releasedBound;
//   - one stopped with SIGTERM hands each of its clusters over (released,
//     not left to expire) within releasedBound;
//   - never, over the whole run, do two replicas run one cluster at once;
//   - after each step, an object created in every cluster is reconciled
//     there (each cluster name reconciles its own namespace);
//   - a pinned cluster stays on its replica while that one lives.
//
// Under -short the fleet has 9 cluster names instead of 30; every step
// still runs.
func TestSharded(t *testing.T) {
	f := sharedFleet(t)
	n := 30
	if testing.Short() {
		n = 9
	}
	s := newShardRun(t, f, n)

	// Three replicas split the fleet. Started one after the other, the
	// first may take clusters that move on once it sees the others.
	begin := time.Now()
	for _, id := range []string{"r1", "r2", "r3"} {
		s.start(id)
	}
	owners := s.settle("r1", "r2", "r3")
	t.Logf("figure: sharded sample: three replicas starting together: settled %s after the first start, %d handovers on the way",
		time.Since(begin).Round(time.Millisecond), len(s.handovers(begin)))
	load := map[string]int{}
	for _, r := range owners {
		load[r]++
	}
	limit := int(math.Ceil(shard.DefaultLoadFactor * float64(n) / 3))
	most := slices.Max(slices.Collect(maps.Values(load)))
	t.Logf("figure: sharded sample: %d clusters over 3 replicas: load %v, max/avg %.2f (limit %d)",
		n, load, float64(most)/(float64(n)/3), limit)
	for id, l := range load {
		if l > limit {
			t.Errorf("%s runs %d clusters, over ceil(1.25 × %d/3) = %d", id, l, n, limit)
		}
		// Each replica's own count, as it publishes it.
		httpGet(t, "http://"+s.metrics[id]+"/metrics", fmt.Sprintf("mccr_shard_clusters_owned{replica=%q} %d", id, l))
	}
	s.reconciled("before", "three")

	// kill -9: the victim's clusters move once its Lease expired.
	victim := "r2"
	var lost []string
	for name, r := range owners {
		if r == victim {
			lost = append(lost, name)
		}
	}
	killAt := time.Now()
	s.kill(victim)
	// Created while nobody runs these clusters: reconciled once someone
	// does.
	for _, name := range lost {
		s.createConfigMap(name, "unowned")
	}
	s.settle("r1", "r3")
	var takeover time.Duration
	for _, name := range lost {
		at, ok := s.firstStart(name, killAt, victim)
		if !ok {
			t.Fatalf("%s: no witness start elsewhere after the kill", name)
		}
		takeover = max(takeover, at.Sub(killAt))
	}
	t.Logf("figure: sharded sample: takeover after kill -9 of a replica running %d clusters: %s (lease duration %s)",
		len(lost), takeover.Round(time.Millisecond), shardLease)
	if takeover > shardLease+takeoverSlack {
		t.Errorf("takeover after kill -9 took %s, over lease duration + %s", takeover, takeoverSlack)
	}
	for _, name := range lost {
		s.waitReconciled(name, "unowned")
	}
	s.reconciled("after-kill")

	// A fourth replica takes its share: about 1/N of the clusters move
	// (N live replicas), plus what bounded loads shift between the others.
	before := s.settle("r1", "r3")
	joinAt := time.Now()
	s.start("r4")
	live := []string{"r1", "r3", "r4"}
	after := s.settle(live...)
	joined := time.Since(joinAt)
	gaps := s.handovers(joinAt)
	planned := 0
	for name, r := range after {
		if before[name] != r {
			planned++
		}
	}
	t.Logf("figure: sharded sample: a replica joining %d: %d of %d clusters moved (the assignment moves %d; 1/N is %d), max gap %s, settled %s after its start",
		len(live)-1, len(gaps), n, planned, n/len(live), longest(gaps).Round(time.Millisecond), joined.Round(time.Millisecond))
	switch {
	case planned == 0:
		t.Error("a replica joined and runs nothing")
	case len(gaps) > n/len(live)+4:
		t.Errorf("a replica joining %d moved %d clusters, over %d/%d + 4 = %d", len(live)-1, len(gaps), n, len(live), n/len(live)+4)
	case len(gaps) > planned+2:
		// Every move beyond the assignment's is a cluster stopped and
		// started for nothing.
		t.Errorf("a replica joining moved %d clusters where the assignment moves %d", len(gaps), planned)
	}
	if worst := longest(gaps); worst > releasedBound {
		t.Errorf("a replica joining: a cluster ran nowhere for %s, over %s", worst, releasedBound)
	}
	s.takenOnlyReleased("a replica joining", live...)
	s.reconciled("after-join")

	// SIGTERM: each of r1's clusters is handed over within releasedBound.
	s.gracefulStop("r1", "r3", "r4")
	s.reconciled("after-graceful")

	// The last two: r3 hands over to r4, then r4 stops with nobody to
	// take over.
	s.gracefulStop("r3", "r4")
	s.replicas["r4"].terminate()

	overlaps := s.overlaps()
	t.Logf("figure: sharded sample: intervals where two replicas ran one cluster at once: %d (of %d intervals)",
		len(overlaps), len(s.spans()))
	for _, o := range overlaps {
		t.Errorf("two replicas ran a cluster at once: %s", o)
	}
}

// shardRun is one run of the sharded sample: the fleet of cluster names,
// the replicas, and what their witnesses logged.
type shardRun struct {
	t        *testing.T
	run      string // names the run's Lease namespace and ConfigMaps
	pins     map[string]string
	names    []string
	member   map[string]client.Client // cluster name → its member's admin client
	memberOf map[string]string        // cluster name → its member's name in the fleet
	args     []string                 // every replica's flags but its identity and metrics
	replicas map[string]*process
	metrics  map[string]string
	deadAt   map[string]time.Time // killed replica → when it was gone
	witness  map[string]*witnessLog
}

// newShardRun spreads n cluster names over the fleet's members in one
// kubeconfig (contexts sharing the members' entries), gives each name a
// namespace of its own in its member, and the Leases a namespace of their
// own on the host.
func newShardRun(t *testing.T, f *test.Fleet, n int) *shardRun {
	t.Helper()
	// The Leases' namespace is the run's own: replicas of an earlier run
	// (-count) are not this run's peers.
	run := test.NamespaceName(t)
	f.CreateNamespace(t, run)
	s := &shardRun{t: t, run: run, member: map[string]client.Client{}, memberOf: map[string]string{}, replicas: map[string]*process{},
		metrics: map[string]string{}, deadAt: map[string]time.Time{}, witness: map[string]*witnessLog{}}
	kc := clientcmdapi.NewConfig()
	members := []string{"m1", "m2"}
	for _, m := range members {
		one := test.KubeconfigFor(m, f.Cluster(m).Config)
		kc.Clusters[m], kc.AuthInfos[m] = one.Clusters[m], one.AuthInfos[m]
	}
	// The same names in every run, so that the assignment (loads, moves)
	// is the same in every run; the ConfigMaps are the run's own.
	for i := range n {
		name := fmt.Sprintf("sharded-c%02d", i)
		m := members[i%len(members)]
		kc.Contexts[name] = &clientcmdapi.Context{Cluster: m, AuthInfo: m}
		c := f.Cluster(m).AdminClient(t)
		if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		s.names = append(s.names, name)
		s.member[name] = c
		s.memberOf[name] = m
	}
	kc.CurrentContext = s.names[0]
	// Pinned to r3, which lives through every step but the last.
	s.pins = map[string]string{s.names[0]: "r3"}
	path := filepath.Join(t.TempDir(), "clusters.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	s.args = []string{
		"--kubeconfig", f.Cluster("host").KubeconfigPath,
		"--clusters", path,
		"--shard-namespace", run,
		"--shard-group", "sharded",
		"--lease-duration", shardLease.String(),
		"--renew-deadline", shardRenew.String(),
		"--retry-period", shardRetry.String(),
		"--graceful-shutdown-timeout", (shardLease - shardRenew - 500*time.Millisecond).String(),
		"--health-probe-bind-address", "0",
		"--namespace-per-cluster",
		"--pin", s.names[0] + "=r3",
		"--log-json",
	}
	for _, name := range s.names {
		s.createConfigMap(name, "before")
	}
	return s
}

func (s *shardRun) start(id string) {
	s.t.Helper()
	s.startWith(id)
}

// startWith starts replica id with extra flags after the run's own: a
// flag given twice takes its last value, so extra may override the run's
// timings.
func (s *shardRun) startWith(id string, extra ...string) {
	s.t.Helper()
	s.metrics[id] = test.FreeAddress(s.t)
	args := append(slices.Clone(s.args), "--shard-identity", id, "--metrics-bind-address", s.metrics[id])
	args = append(args, extra...)
	p := startCmd(s.t, "sharded "+id, exec.Command(filepath.Join(bin, "sharded"), args...))
	s.replicas[id] = p
	s.witness[id] = &witnessLog{p: p}
}

// kill ends a replica with SIGKILL, as a crash would.
func (s *shardRun) kill(id string) {
	s.t.Helper()
	p := s.replicas[id]
	if err := p.cmd.Process.Kill(); err != nil {
		s.t.Fatal(err)
	}
	<-p.done
	s.deadAt[id] = time.Now()
	if strings.Contains(p.out.String(), "DATA RACE") {
		s.t.Fatalf("%s reported a data race", p.name)
	}
}

// gracefulStop stops replica id with SIGTERM, waits until the others run
// the fleet, and checks each of its clusters was released and started
// elsewhere within releasedBound of its witness stopping here.
func (s *shardRun) gracefulStop(id string, others ...string) {
	s.t.Helper()
	owned := s.settle(append([]string{id}, others...)...)
	stopAt := time.Now()
	s.replicas[id].terminate()
	s.settle(others...)
	gaps := s.handovers(stopAt)
	handed := 0
	for _, r := range owned {
		if r == id {
			handed++
		}
	}
	if len(gaps) < handed {
		s.t.Fatalf("graceful stop of %s: %d handovers, want at least its %d clusters", id, len(gaps), handed)
	}
	worst := longest(gaps)
	s.t.Logf("figure: sharded sample: graceful stop of %s: its %d clusters (%d handovers in all) went to %v, max gap %s",
		id, handed, len(gaps), others, worst.Round(time.Millisecond))
	if worst > releasedBound {
		s.t.Errorf("graceful stop of %s: a cluster ran nowhere for %s, over %s", id, worst, releasedBound)
	}
	s.takenOnlyReleased("graceful stop of "+id, id)
}

// takenOnlyReleased checks that no replica took a cluster over from one
// of from as a holder whose claim expired: every cluster those replicas
// let go they released (a release is taken over "from" nobody).
func (s *shardRun) takenOnlyReleased(step string, from ...string) {
	s.t.Helper()
	for _, id := range slices.Sorted(maps.Keys(s.replicas)) {
		for line := range strings.Lines(s.replicas[id].out.String()) {
			if !strings.Contains(line, `"msg":"sharding: took over cluster"`) {
				continue
			}
			for _, f := range from {
				if strings.Contains(line, `"from":"`+f+`"`) {
					s.t.Errorf("%s: %s took a cluster over from %s after its claim expired, not released: %s", step, id, f, strings.TrimSpace(line))
				}
			}
		}
	}
}

// settle waits until every cluster runs on exactly one replica, the one
// the assignment over the live replicas gives it, and returns the owners.
func (s *shardRun) settle(live ...string) map[string]string {
	s.t.Helper()
	want := shard.Assign(shard.Input{Replicas: live, Names: s.names, Pins: s.pins})
	var got map[string][]string
	eventually(s.t, fmt.Sprintf("every cluster to run on its replica among %v", live), func() (bool, error) {
		for _, id := range live {
			if p := s.replicas[id]; p.exited() {
				return false, fmt.Errorf("%s exited: %w", p.name, p.exitErr())
			}
		}
		got = s.running()
		for _, name := range s.names {
			if len(got[name]) != 1 || got[name][0] != want[name] {
				return false, nil
			}
		}
		return true, nil
	})
	return want
}

// running returns, per cluster, the replicas whose witness started it and
// has not stopped it.
func (s *shardRun) running() map[string][]string {
	out := map[string][]string{}
	for _, sp := range s.spans() {
		if sp.stop.IsZero() {
			out[sp.cluster] = append(out[sp.cluster], sp.replica)
		}
	}
	return out
}

// span is one replica running one cluster, from its witness start to its
// witness stop (zero while it runs; a killed replica's end at its death).
type span struct {
	cluster, replica string
	start, stop      time.Time
}

func (sp span) String() string {
	stop := "running"
	if !sp.stop.IsZero() {
		stop = sp.stop.Format("15:04:05.000")
	}
	return fmt.Sprintf("%s on %s %s–%s", sp.cluster, sp.replica, sp.start.Format("15:04:05.000"), stop)
}

func (s *shardRun) spans() []span {
	var out []span
	for id, w := range s.witness {
		open := map[string]time.Time{}
		for _, e := range w.read() {
			switch {
			case e.start:
				if at, ok := open[e.cluster]; ok {
					// Two Managers of one cluster in one replica.
					out = append(out, span{e.cluster, id, at, time.Time{}})
				}
				open[e.cluster] = e.at
			default:
				out = append(out, span{e.cluster, id, open[e.cluster], e.at})
				delete(open, e.cluster)
			}
		}
		for cluster, at := range open {
			out = append(out, span{cluster, id, at, s.deadAt[id]})
		}
	}
	slices.SortFunc(out, func(a, b span) int { return a.start.Compare(b.start) })
	return out
}

func (s *shardRun) spansOf(cluster string) []span {
	return slices.DeleteFunc(s.spans(), func(sp span) bool { return sp.cluster != cluster })
}

// firstStart returns when a replica other than not first started cluster
// after since.
func (s *shardRun) firstStart(cluster string, since time.Time, not string) (time.Time, bool) {
	for _, sp := range s.spansOf(cluster) {
		if sp.replica != not && !sp.start.Before(since) {
			return sp.start, true
		}
	}
	return time.Time{}, false
}

func longest(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// handovers returns, for every start after t of a cluster on a replica
// other than the one that ran it last, how long it ran nowhere before.
func (s *shardRun) handovers(t time.Time) []time.Duration {
	var gaps []time.Duration
	for _, name := range s.names {
		var last *span
		for _, sp := range s.spansOf(name) {
			if last != nil && sp.start.After(t) && sp.replica != last.replica {
				gaps = append(gaps, sp.start.Sub(last.stop))
			}
			last = &sp
		}
	}
	return gaps
}

// overlaps lists every pair of spans of one cluster that overlap in time.
func (s *shardRun) overlaps() []string {
	var out []string
	for _, name := range s.names {
		spans := s.spansOf(name)
		for i, a := range spans {
			for _, b := range spans[i+1:] {
				if a.stop.IsZero() || b.start.Before(a.stop) {
					out = append(out, fmt.Sprintf("%s and %s", a, b))
				}
			}
		}
	}
	return out
}

// reconciled creates a ConfigMap named phase in every cluster's namespace
// and waits until each is stamped with its cluster's name.
func (s *shardRun) reconciled(phases ...string) {
	s.t.Helper()
	for _, phase := range phases {
		for _, name := range s.names {
			if phase != "before" {
				s.createConfigMap(name, phase)
			}
		}
		for _, name := range s.names {
			s.waitReconciled(name, phase)
		}
	}
}

// createConfigMap creates, in the namespace of cluster, a ConfigMap named
// after the phase and this run.
func (s *shardRun) createConfigMap(cluster, phase string) {
	s.t.Helper()
	createConfigMap(s.t, s.member[cluster], cluster, phase+"-"+s.run, true)
}

// waitReconciled waits until the ConfigMap of phase in cluster is stamped
// with the cluster's name.
func (s *shardRun) waitReconciled(cluster, phase string) {
	s.t.Helper()
	waitSeenIn(s.t, s.member[cluster], cluster, phase+"-"+s.run, cluster)
}

// witnessLog reads a replica's witness lines as they come.
type witnessLog struct {
	p      *process
	offset int
	events []witnessEvent
}

type witnessEvent struct {
	start   bool
	cluster string
	at      time.Time
}

// read parses the complete lines logged since the last call and returns
// every witness event so far.
func (w *witnessLog) read() []witnessEvent {
	data := w.p.out.from(w.offset)
	end := bytes.LastIndexByte(data, '\n') + 1
	w.offset += end
	for line := range bytes.Lines(data[:end]) {
		if !bytes.Contains(line, []byte(`"witness `)) {
			continue
		}
		var rec struct {
			Msg      string      `json:"msg"`
			Cluster  string      `json:"cluster"`
			UnixNano json.Number `json:"unixNano"`
		}
		if json.Unmarshal(line, &rec) != nil || (rec.Msg != "witness start" && rec.Msg != "witness stop") {
			continue
		}
		ns, err := strconv.ParseInt(rec.UnixNano.String(), 10, 64)
		if err != nil {
			continue
		}
		w.events = append(w.events, witnessEvent{rec.Msg == "witness start", rec.Cluster, time.Unix(0, ns)})
	}
	return w.events
}

// from returns a copy of what was written from offset on.
func (b *lockedBuffer) from(offset int) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes()[offset:])
}
