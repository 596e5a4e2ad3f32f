package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/fakeapi"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// The probe settings of this file's tests: an outage is to be found within
// reachInterval + reachTimeout + reachSlack.
const (
	reachInterval = time.Second
	reachTimeout  = time.Second
	reachSlack    = 2 * time.Second
)

// reachServer starts a Server on the fleet's host with the probe settings
// above (probes: false turns the periodic probe off) and, with watch, the
// ConfigMap reconciler watching ns in every member; without, the members
// have no controller and so no open watch at all.
func reachServer(t *testing.T, ns string, watch, probes bool, more ...server.Option) (*server.Server, func() error) {
	t.Helper()
	o := ctrl.Options{
		Logger:                 test.Logger(t),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
	}
	opts := append([]server.Option{func(o *server.Options) {
		o.Backoff.Duration = 100 * time.Millisecond
		o.Backoff.Cap = time.Second
		o.ReachProbeInterval = reachInterval
		o.ReachProbeTimeout = reachTimeout
		if !probes {
			o.ReachProbeInterval = -1
		}
	}}, more...)
	srv, err := server.NewServer(fleet.Cluster("host").Config, o, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if watch {
		r := &ConfigMapReconciler{Client: srv.GetClient(), rec: newTally(), name: fmt.Sprintf("reach-%s-%v", ns, probes)}
		srv.AddReconcilerSetup(r.SetupWithManager)
	}
	return srv, test.Run(t, srv)
}

// watched is one Server's view of one member during an outage.
type watched struct {
	what              string
	srv               *server.Server
	name              string
	probes            bool
	down, back        time.Duration // since the outage began / ended; 0: not seen
	downErr           error
	lastProbeWhenDown time.Time
}

func (w *watched) status(t *testing.T) server.ClusterStatus {
	t.Helper()
	st, err := w.srv.Status(w.name)
	if err != nil {
		t.Fatalf("%s: %v", w.what, err)
	}
	return st
}

// TestReachProbeFindsAStoppedAPIServer: a member's API server is killed
// and restarted, as seen by four Servers at once — members with and
// without open watches, with the periodic probe on and off. With probes,
// both are Unreachable within interval + timeout (+ slack) and Ready again
// once it is back; without probes, the member with watches still is (its
// watches' errors), and the member without watches stays Ready, serving
// stale data, for the whole outage: what the probe is for. Nothing of any
// Server is left once they stop.
func TestReachProbeFindsAStoppedAPIServer(t *testing.T) {
	ns := testNamespace(t)
	ignore := goleak.IgnoreCurrent()
	victim := fleet.Cluster("m4")
	all := make([]*watched, 0, 4)
	stops := make([]func() error, 0, 4)
	for _, watch := range []bool{true, false} {
		for _, probes := range []bool{true, false} {
			what := fmt.Sprintf("watches=%v probes=%v", watch, probes)
			srv, stop := reachServer(t, ns, watch, probes)
			w := &watched{what: what, srv: srv, probes: probes, name: fmt.Sprintf("reach-w%v-p%v", watch, probes)}
			if err := srv.Add(config.NewNamedConfig(w.name, victim.Config)); err != nil {
				t.Fatal(err)
			}
			all = append(all, w)
			stops = append(stops, stop)
		}
	}
	for _, w := range all {
		waitReady(t, w.srv, w.name)
		st := w.status(t)
		if !st.Reachable || st.LastProbe.IsZero() || st.ProbeLatency <= 0 {
			t.Errorf("%s: Ready with Reachable=%v LastProbe=%v ProbeLatency=%v; want the start's check recorded", w.what, st.Reachable, st.LastProbe, st.ProbeLatency)
		}
	}
	// The periodic probe runs while the member is Ready.
	ready := time.Now()
	for _, w := range all {
		if !w.probes {
			continue
		}
		test.Eventually(t, reachInterval+reachTimeout+reachSlack, w.what+" probed while Ready", func() bool {
			st := w.status(t)
			return st.Reachable && st.LastProbe.After(ready)
		})
	}

	if err := victim.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = victim.StartAPIServer(context.Background())
		}
	})
	begin := time.Now()
	// Until the probed members are found, and then as long again (and at
	// least a probe interval and timeout), to show the unprobed member
	// without watches never is.
	observe := func(deadline time.Time, done func() bool) {
		for time.Now().Before(deadline) && !done() {
			for _, w := range all {
				if st := w.status(t); w.down == 0 && st.Phase == server.PhaseUnreachable && !st.Reachable {
					w.down, w.downErr, w.lastProbeWhenDown = time.Since(begin), st.LastError, st.LastProbe
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	bound := reachInterval + reachTimeout + reachSlack
	observe(begin.Add(bound), func() bool { return all[0].down > 0 && all[1].down > 0 && all[2].down > 0 })
	observe(time.Now().Add(max(time.Since(begin), reachInterval+reachTimeout)), func() bool { return false })
	for _, w := range all {
		switch {
		case w.what == "watches=false probes=false":
			if w.down != 0 {
				t.Errorf("%s: Unreachable after %s; without probes nothing should tell", w.what, w.down)
			}
		case w.down == 0:
			t.Errorf("%s: not Unreachable within %s of its API server's death", w.what, bound)
		case w.probes && w.lastProbeWhenDown.Before(begin):
			t.Errorf("%s: Unreachable, but its LastProbe %v predates the outage", w.what, w.lastProbeWhenDown)
		default:
			t.Logf("%s: Unreachable %s after the API server died (%v)", w.what, w.down.Round(time.Millisecond), w.downErr)
		}
	}

	// Watched while the API server starts: members may be Ready before
	// StartAPIServer has seen /readyz answer.
	begin = time.Now()
	allBack := make(chan struct{})
	go func() {
		defer close(allBack)
		for deadline := begin.Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			done := true
			for _, w := range all {
				st, _ := w.srv.Status(w.name)
				if w.back == 0 && st.Phase == server.PhaseReady && st.Reachable {
					w.back = time.Since(begin)
				}
				done = done && w.back > 0
			}
			if done {
				return
			}
		}
	}()
	err := victim.StartAPIServer(context.Background())
	restarted = err == nil
	startTook := time.Since(begin)
	<-allBack
	if err != nil {
		t.Fatal(err)
	}
	// StartAPIServer waits for /readyz through client-go's shared
	// transport, which keeps the connection: not the Servers'.
	if rt, err := rest.TransportFor(victim.Config); err == nil {
		utilnet.CloseIdleConnectionsFor(rt)
	}
	for _, w := range all {
		if w.back == 0 {
			t.Errorf("%s: not Ready within 60s of its API server's restart", w.what)
		}
	}
	t.Logf("StartAPIServer (restart until /readyz answers) took %s", startTook.Round(time.Millisecond))
	for _, w := range all {
		if w.down > 0 {
			t.Logf("%s: Ready %s after its API server was restarted", w.what, w.back.Round(time.Millisecond))
		}
	}
	for _, stop := range stops {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}
	// The kit's own wait for the restarted process.
	leakcheck.VerifyNone(t, ignore, goleak.IgnoreAnyFunction("github.com/mccr-dev/mccr/test.(*Cluster).StartAPIServer.func1"))
}

// TestReachProbeFindsAHungAPIServer: an API server that keeps its
// connections open and answers nothing (a network partition, a wedged
// process) breaks no watch: only the probe tells, within interval +
// timeout. Once it answers again the member restarts and is Ready.
func TestReachProbeFindsAHungAPIServer(t *testing.T) {
	ns := testNamespace(t)
	ignore := goleak.IgnoreCurrent()
	proxy, err := test.StartFaultProxy(fleet.Cluster("m3").Config)
	if err != nil {
		t.Fatal(err)
	}
	srv, stop := reachServer(t, ns, true, true)
	if err := srv.Add(config.NewNamedConfig("reach-hung", proxy.Config())); err != nil {
		t.Fatal(err)
	}
	waitReady(t, srv, "reach-hung")
	if err := proxy.Freeze(); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	bound := reachInterval + reachTimeout + reachSlack
	test.Eventually(t, bound, "hung member Unreachable", func() bool {
		st, _ := srv.Status("reach-hung")
		return st.Phase == server.PhaseUnreachable && !st.Reachable
	})
	t.Logf("hung API server: Unreachable after %s", time.Since(begin).Round(time.Millisecond))
	st, _ := srv.Status("reach-hung")
	if st.LastError == nil || !strings.Contains(st.LastError.Error(), "did not answer within") {
		t.Errorf("LastError %v, want the probe's timeout", st.LastError)
	}
	if err := proxy.Pass(); err != nil {
		t.Fatal(err)
	}
	begin = time.Now()
	waitReady(t, srv, "reach-hung")
	t.Logf("hung API server: Ready %s after it answered again", time.Since(begin).Round(time.Millisecond))
	if err := stop(); err != nil {
		t.Error(err)
	}
	if err := proxy.Close(); err != nil {
		t.Error(err)
	}
	leakcheck.VerifyNone(t, ignore)
}

// inFlight counts the probes (GET /version) in flight below a member's
// transport, and the most ever at once. A probe is in flight from its
// request until its answer's body is closed (the probe closes it once read,
// before it gives its Limiter slot back): an answer can stop after its
// headers, and a probe reading the rest of it is as hung as one waiting for
// the headers, though its RoundTrip has returned.
type inFlight struct{ now, most, total atomic.Int32 }

func (f *inFlight) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.URL.Path != "/version" {
			return rt.RoundTrip(req)
		}
		n := f.now.Add(1)
		f.total.Add(1)
		for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			f.now.Add(-1)
			return resp, err
		}
		resp.Body = &answerBody{ReadCloser: resp.Body, closed: sync.OnceFunc(func() { f.now.Add(-1) })}
		return resp, nil
	})
}

// answerBody is a counted probe's answer: closed tells, once, that the
// probe is over.
type answerBody struct {
	io.ReadCloser
	closed func()
}

func (b *answerBody) Close() error {
	err := b.ReadCloser.Close()
	b.closed()
	return err
}

// stallAnswer, once armed, lets the headers of the next probe's answer
// through and holds the rest until the probe gives up: a partition that
// falls between two frames of one answer.
type stallAnswer struct {
	armed atomic.Bool
	// reading is set once the probe waits for the rest of the answer.
	reading atomic.Bool
}

func (s *stallAnswer) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil && req.URL.Path == "/version" && s.armed.CompareAndSwap(true, false) {
			resp.Body = &stalledBody{ReadCloser: resp.Body, ctx: req.Context(), reading: &s.reading, closed: make(chan struct{})}
		}
		return resp, err
	})
}

type stalledBody struct {
	io.ReadCloser
	ctx     context.Context
	reading *atomic.Bool
	once    sync.Once
	closed  chan struct{}
}

func (b *stalledBody) Read([]byte) (int, error) {
	b.reading.Store(true)
	select {
	case <-b.ctx.Done():
		return 0, b.ctx.Err()
	case <-b.closed:
		return 0, http.ErrBodyReadAfterClose
	}
}

func (b *stalledBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return b.ReadCloser.Close()
}

// TestReachProbeHungMidAnswer: an answer that stops after its headers
// leaves the probe as hung as no answer at all: it is in flight, holds the
// fleet's only probe slot (another member's probe waits for it), and finds
// the member Unreachable once ReachProbeTimeout has passed. The next
// answer comes whole: the member is Reachable again as it runs (one slow
// answer), and nothing is left once the Server stops.
func TestReachProbeHungMidAnswer(t *testing.T) {
	ns := testNamespace(t)
	ignore := goleak.IgnoreCurrent()
	// The stalled probe holds the slot this long: long enough for the
	// test to see the other member's probe wait, on a loaded machine too.
	const timeout = 5 * time.Second
	srv, stop := reachServer(t, ns, false, true, func(o *server.Options) {
		o.ReachProbeInterval = 100 * time.Millisecond
		o.OutageProbeInterval = time.Second // the outage lasts that long
		o.ReachProbeTimeout = timeout
		o.MaxConcurrentProbes = 1
	})
	var stall stallAnswer
	var stalled inFlight
	cfg := rest.CopyConfig(fleet.Cluster("m2").Config)
	cfg.Wrap(stall.wrap)
	cfg.Wrap(stalled.wrap)
	if err := srv.Add(config.NewNamedConfig("mid-answer", cfg)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Add(config.NewNamedConfig("mid-answer-other", fleet.Cluster("m3").Config)); err != nil {
		t.Fatal(err)
	}
	waitReady(t, srv, "mid-answer", "mid-answer-other")

	stall.armed.Store(true)
	begin := time.Now()
	test.Eventually(t, 10*time.Second, "a probe of mid-answer waiting for the rest of its answer", stall.reading.Load)
	if n := stalled.now.Load(); n != 1 {
		t.Errorf("%d probes of mid-answer in flight while one waits for the rest of its answer, want 1", n)
	}
	test.Eventually(t, 10*time.Second, "mid-answer-other's probe waiting for the slot", func() bool {
		buf := make([]byte, 8<<20)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "reach.(*Limiter).acquire") == 1
	})
	test.Eventually(t, timeout+reachSlack+time.Second, "mid-answer Unreachable", func() bool {
		st, _ := srv.Status("mid-answer")
		return st.Phase == server.PhaseUnreachable && !st.Reachable
	})
	if took := time.Since(begin); took < timeout-200*time.Millisecond {
		t.Errorf("Unreachable %s after its answer stalled; want its probe to wait ReachProbeTimeout (%s)", took, timeout)
	}
	st, _ := srv.Status("mid-answer")
	if st.LastError == nil || !strings.Contains(st.LastError.Error(), "did not answer within") {
		t.Errorf("LastError = %v; want the probe's timeout", st.LastError)
	}

	test.Eventually(t, 10*time.Second, "mid-answer Ready and Reachable again", func() bool {
		st, _ := srv.Status("mid-answer")
		return st.Phase == server.PhaseReady && st.Reachable
	})
	if st, _ := srv.Status("mid-answer"); st.Restarts != 0 {
		t.Errorf("mid-answer restarted %d times; one slow answer should not restart it", st.Restarts)
	}
	if err := stop(); err != nil {
		t.Error(err)
	}
	leakcheck.VerifyNone(t, ignore)
}

// TestReachProbesAreBoundedAcrossTheFleet: fifty members on a slow API
// server, probed far more often than it answers, never have more probes in
// flight than MaxConcurrentProbes; waiting for a turn makes no member
// Unreachable.
func TestReachProbesAreBoundedAcrossTheFleet(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	api := fakeapi.New()
	api.Start()
	defer api.Close()
	const members, bound = 50, 5
	srv, stop := reachServer(t, "reach-bound", false, true, func(o *server.Options) {
		o.ReachProbeInterval = 10 * time.Millisecond
		o.ReachProbeTimeout = 5 * time.Second
		o.MaxConcurrentProbes = bound
	})
	var count inFlight
	names := make([]string, 0, members)
	for i := range members {
		cfg := api.Config()
		cfg.Wrap(count.wrap)
		name := fmt.Sprintf("fake-%02d", i)
		names = append(names, name)
		if err := srv.Add(config.NewNamedConfig(name, cfg)); err != nil {
			t.Fatal(err)
		}
	}
	waitReady(t, srv, names...)
	api.SetLatency(40 * time.Millisecond)
	from := count.total.Load()
	test.Eventually(t, 30*time.Second, "each member probed several times", func() bool { return count.total.Load()-from >= 3*members })
	most := count.most.Load()
	t.Logf("%d probes of %d members, at most %d in flight", count.total.Load()-from, members, most)
	if most > bound || most < 2 {
		t.Errorf("at most %d probes in flight, want 2..%d", most, bound)
	}
	for _, n := range names {
		if st, _ := srv.Status(n); st.Phase != server.PhaseReady || !st.Reachable {
			t.Errorf("%s: %s, Reachable=%v while waiting its turn", n, st.Phase, st.Reachable)
		}
	}
	api.SetLatency(0)
	if err := stop(); err != nil {
		t.Error(err)
	}
	api.Close()
	leakcheck.VerifyNone(t, ignore)
}

// histogramCount is the sample count of the histogram name's series whose
// label key has value, and whether there is such a series.
func histogramCount(t *testing.T, name, key, value string) (uint64, bool) {
	t.Helper()
	m := series(t, name, key, value)
	return m.GetHistogram().GetSampleCount(), m != nil
}

// TestReachMetricsFollowTheCluster: mccr_cluster_reachable and
// mccr_cluster_probe_seconds exist for a member while it is in the fleet,
// follow its probes, and are gone once it is deleted.
func TestReachMetricsFollowTheCluster(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	proxy, err := test.StartFaultProxy(fleet.Cluster("m2").Config)
	if err != nil {
		t.Fatal(err)
	}
	srv, stop := reachServer(t, "reach-metrics", false, true)
	const name = "reach-metrics"
	if err := srv.Add(config.NewNamedConfig(name, proxy.Config())); err != nil {
		t.Fatal(err)
	}
	waitReady(t, srv, name)
	test.Eventually(t, reachInterval+reachTimeout+reachSlack, "reachable 1 and probes timed", func() bool {
		n, _ := histogramCount(t, "mccr_cluster_probe_seconds", "cluster", name)
		return metricValue(t, "mccr_cluster_reachable", "cluster", name) == 1 && n >= 2
	})
	proxy.Refuse()
	test.Eventually(t, reachInterval+reachTimeout+reachSlack, "reachable 0", func() bool {
		return metricValue(t, "mccr_cluster_reachable", "cluster", name) == 0
	})
	if err := srv.Delete(name); err != nil {
		t.Fatal(err)
	}
	v := metricValue(t, "mccr_cluster_reachable", "cluster", name)
	if _, ok := histogramCount(t, "mccr_cluster_probe_seconds", "cluster", name); v != -1 || ok {
		t.Errorf("after Delete: mccr_cluster_reachable %v, mccr_cluster_probe_seconds present %v; want both gone", v, ok)
	}
	if err := stop(); err != nil {
		t.Error(err)
	}
	if err := proxy.Close(); err != nil {
		t.Error(err)
	}
	leakcheck.VerifyNone(t, ignore)
}
