package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/fleetz"
	"github.com/mccr-dev/mccr/internal/reach"
)

// unstartedServer is a Server that is never started: Add only records the
// members (Pending), which is all the page needs to read.
func unstartedServer(t testing.TB) *Server {
	t.Helper()
	srv, err := NewServer(&rest.Config{Host: "https://127.0.0.1:1"}, ctrl.Options{
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.releaseHost)
	return srv
}

func addNamed(t testing.TB, srv *Server, name, file string) {
	t.Helper()
	nc := config.NewNamedConfig(name, &rest.Config{Host: "https://127.0.0.1:1", BearerToken: "hunter2"})
	nc.Source = config.Source{File: file, Context: name}
	if err := srv.Add(nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Delete(name) })
}

func get(t *testing.T, h http.HandlerFunc, target string) (http.Header, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest(http.MethodGet, target, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", target, rec.Code, rec.Body)
	}
	return rec.Header(), rec.Body.String()
}

// TestFleetPageReadsTheClusterRecords fills the page from members whose
// names try to become markup, one of them Failed with an error that
// carries a token, and checks the JSON against Statuses, the HTML's
// escaping, the filter and the orders.
func TestFleetPageReadsTheClusterRecords(t *testing.T) {
	srv := unstartedServer(t)
	names := []string{`<script>alert(1)</script>`, `quo"te's & ünï ☸`, "plain"}
	for _, n := range names {
		addNamed(t, srv, n, "/fleet/"+n+".kubeconfig")
	}
	// The failure goes through the record, as a generation reports it.
	failing := srv.clusters.get("plain")
	failing.setPhase(nil, PhaseFailed, errors.New(`Get "https://x/api?token=hunter2": <b>refused</b>`))
	// A probe that found no answer, as the reachability probe records it.
	probedAt := time.Now().Add(-3 * time.Second)
	quoted := srv.clusters.get(names[1])
	quoted.probed(nil, reach.Result{At: probedAt, Took: 5 * time.Second, Err: errors.New("no answer")})
	clusterSeries{name: names[0]}.reconciled("widgets", "success", time.Millisecond)
	clusterSeries{name: names[0]}.reconciled("widgets", "error", time.Millisecond)
	// The series of a member of another Server of the process (the
	// registry is the process's): neither a row of this page nor in its
	// totals.
	stranger := clusterSeries{name: "another-servers-member"}
	stranger.init()
	stranger.reconciled("gadgets", "success", time.Millisecond)
	t.Cleanup(stranger.forget)
	h := newFleetPage(srv)

	res, body := get(t, h.serveJSON, "/fleetz.json")
	if ct := res.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var p struct {
		Replica  fleetz.Replica
		Total    int
		Phases   []fleetz.PhaseCount
		Clusters []struct {
			Name, Phase, Source, LastError, Reachable string
			Since, LastProbe                          time.Time
			ProbeLatency                              string
			Controllers                               []fleetz.ControllerStat
		}
		Controllers []fleetz.ControllerTotals
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	statuses := srv.Statuses()
	if p.Total != len(statuses) || len(p.Clusters) != len(statuses) {
		t.Fatalf("total %d, %d rows; Statuses has %d", p.Total, len(p.Clusters), len(statuses))
	}
	for i, st := range statuses { // same order: by name
		c := p.Clusters[i]
		wantErr := ""
		if st.LastError != nil {
			wantErr = st.LastError.Error()
		}
		if c.Name != st.Name || c.Phase != string(st.Phase) || !c.Since.Equal(st.Since) || c.Source != st.Source.String() || c.LastError != wantErr {
			t.Errorf("row %d = %+v, Status = %+v", i, c, st)
		}
	}
	for _, c := range p.Clusters {
		want := "unknown" // Pending, never probed
		if c.Name == names[1] {
			want = "no"
			if !c.LastProbe.Equal(probedAt) || c.ProbeLatency != "5s" {
				t.Errorf("%s: last probe %s (%s), want %s (5s)", c.Name, c.LastProbe, c.ProbeLatency, probedAt)
			}
		}
		if c.Reachable != want {
			t.Errorf("%s: reachable %q, want %q", c.Name, c.Reachable, want)
		}
	}
	if strings.Contains(body, "hunter2") {
		t.Errorf("the page shows the token:\n%s", body)
	}
	if p.Replica.Role != "single" {
		t.Errorf("role %q, want single (no leader election)", p.Replica.Role)
	}
	wantPhases := []fleetz.PhaseCount{{Phase: "Pending", Count: 2}, {Phase: "Failed", Count: 1}}
	if fmt.Sprint(p.Phases) != fmt.Sprint(wantPhases) {
		t.Errorf("phases %v, want %v", p.Phases, wantPhases)
	}
	for _, c := range p.Clusters {
		if c.Name == names[0] && (len(c.Controllers) != 1 || c.Controllers[0].Reconciles != 2 || c.Controllers[0].Errors != 1) {
			t.Errorf("%s controllers %+v, want widgets with 2 reconciles, 1 error", c.Name, c.Controllers)
		}
	}
	if len(p.Controllers) != 1 || p.Controllers[0].Name != "widgets" || p.Controllers[0].Reconciles != 2 || p.Controllers[0].Errors != 1 {
		t.Errorf("controller totals %+v, want only widgets with 2 reconciles, 1 error", p.Controllers)
	}

	// The filter.
	_, body = get(t, h.serveJSON, "/fleetz.json?phase=Failed")
	var failed struct {
		Clusters []struct{ Name, LastError string }
	}
	if err := json.Unmarshal([]byte(body), &failed); err != nil {
		t.Fatal(err)
	}
	if len(failed.Clusters) != 1 || failed.Clusters[0].Name != "plain" || !strings.Contains(failed.Clusters[0].LastError, "<b>refused</b>") {
		t.Errorf("?phase=Failed gave %+v", failed.Clusters)
	}

	// The HTML: every name as text, no markup from outside.
	res, page := get(t, h.serveHTML, "/fleetz?sort=phase")
	if ct := res.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	if csp := res.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	for _, bad := range []string{"<script>", "<b>refused"} {
		if strings.Contains(page, bad) {
			t.Errorf("HTML holds raw %q", bad)
		}
	}
	text := html.UnescapeString(page)
	for _, n := range names {
		if !strings.Contains(text, `<td class="name">`+n+`</td>`) {
			t.Errorf("no row shows %q as text", n)
		}
	}
	if i, j := strings.Index(text, `data-phase="Pending"`), strings.Index(text, `data-phase="Failed"`); i < 0 || j < i {
		t.Errorf("?sort=phase: Pending rows should come before Failed ones")
	}
	rec := httptest.NewRecorder()
	h.serveHTML(rec, httptest.NewRequest(http.MethodGet, `/fleetz?phase="><script>alert(5)</script>`, nil))
	if ct := rec.Header().Get("Content-Type"); rec.Code != http.StatusBadRequest || !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("a filter that is markup: %d as %q; want 400 as text/plain", rec.Code, ct)
	}

	rec = httptest.NewRecorder()
	h.serveHTML(rec, httptest.NewRequest(http.MethodPost, "/fleetz", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", rec.Code)
	}
}

// TestFleetPageRates measures rates between two readings of the counters.
func TestFleetPageRates(t *testing.T) {
	var b rateBase
	t0 := time.Now()
	counts := func(n float64) reconcileCounts {
		rc := reconcileCounts{byCluster: map[string]map[string]reconcileCount{}}
		rc.add("a", "c", n, 0)
		return rc
	}
	if w, r := b.rates(t0, counts(10)); w != 0 || r != nil {
		t.Errorf("first reading: window %s, rates %v; want none", w, r)
	}
	if w, r := b.rates(t0.Add(500*time.Millisecond), counts(11)); w != 0 || r != nil {
		t.Errorf("too soon: window %s, rates %v; want none", w, r)
	}
	w, r := b.rates(t0.Add(10*time.Second), counts(30))
	if w != 10*time.Second || r[seriesKey{"a", "c"}] != 2 {
		t.Errorf("window %s, rates %v; want 10s, 2/s", w, r)
	}
	// A counter that went down (the member was deleted and added again)
	// has no rate; the base is renewed after rateMaxWindow.
	if _, r := b.rates(t0.Add(20*time.Second), counts(5)); len(r) != 0 {
		t.Errorf("counter went down: rates %v", r)
	}
	b.rates(t0.Add(rateMaxWindow+time.Second), counts(100))
	if w, r := b.rates(t0.Add(rateMaxWindow+11*time.Second), counts(150)); w != 10*time.Second || r[seriesKey{"a", "c"}] != 5 {
		t.Errorf("after renewal: window %s, rates %v; want 10s, 5/s", w, r)
	}
}

// BenchmarkFleetPage renders the page of 10,000 members (never started,
// so Pending), two controllers each with reconcile series: Statuses, the
// counters, and the HTML, as a request does.
func BenchmarkFleetPage(b *testing.B) {
	const n = 10000
	srv := unstartedServer(b)
	for i := range n {
		name := fmt.Sprintf("cluster-%05d", i)
		nc := config.NewNamedConfig(name, &rest.Config{Host: fmt.Sprintf("https://10.0.%d.%d:6443", i/250, i%250+1)})
		nc.Source = config.Source{File: "/fleet/" + name + ".kubeconfig", Context: name}
		if err := srv.Add(nc); err != nil {
			b.Fatal(err)
		}
		s := clusterSeries{name: name}
		s.reconciled("configmaps", "success", time.Millisecond)
		s.reconciled("secrets", "error", time.Millisecond)
	}
	b.Cleanup(func() {
		for i := range n {
			srv.clusters.get(fmt.Sprintf("cluster-%05d", i)).series.forget()
		}
	})
	h := newFleetPage(srv)
	for _, path := range []string{"/fleetz", "/fleetz.json"} {
		serve := h.serveHTML
		if strings.HasSuffix(path, ".json") {
			serve = h.serveJSON
		}
		b.Run(path, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				serve(rec, httptest.NewRequest(http.MethodGet, path, nil))
				if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "cluster-09999") {
					b.Fatalf("%d", rec.Code)
				}
				b.SetBytes(int64(rec.Body.Len()))
			}
		})
	}
}

// TestQueueDepthsReadFromTheirVector: the page reads controller-runtime's
// workqueue_depth from its vector alone, found through the registry, and
// reads the same as gathering the whole registry would. If
// controller-runtime describes the vector otherwise, the page still reads
// it the slow way and this test says the vector was not found.
func TestQueueDepthsReadFromTheirVector(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "fleetz-depth-test"})
	defer q.ShutDown()
	for _, item := range []string{"a", "b", "c"} {
		q.Add(item)
	}
	if workqueueDepth() == nil {
		t.Fatal("controller-runtime's workqueue_depth vector not found: the page gathers the whole registry for it")
	}
	if got := readQueueDepths()["fleetz-depth-test"]; got != 3 {
		t.Errorf("depth %v, want 3", got)
	}
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	gathered := map[string]float64{}
	for _, f := range families {
		if f.GetName() == workqueueDepthName {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "name" {
						gathered[l.GetValue()] += m.GetGauge().GetValue()
					}
				}
			}
		}
	}
	if got := readQueueDepths(); !maps.Equal(got, gathered) {
		t.Errorf("depths read %v, gathered %v", got, gathered)
	}
}

// At most maxFleetRenders views are rendered at once: another waits for a
// slot, and gives up without rendering when its viewer leaves meanwhile.
func TestFleetPageRendersAFewViewsAtOnce(t *testing.T) {
	srv := unstartedServer(t)
	addNamed(t, srv, "one", "/fleet/one.kubeconfig")
	h := newFleetPage(srv)
	for range maxFleetRenders {
		h.renders <- struct{}{} // views being rendered
	}
	ctx, cancel := context.WithCancel(t.Context())
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.serveJSON(rec, httptest.NewRequest(http.MethodGet, "/fleetz.json", nil).WithContext(ctx))
	}()
	select {
	case <-done:
		t.Fatal("a view was rendered while every slot was taken")
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	<-done
	if rec.Code != http.StatusServiceUnavailable || strings.Contains(rec.Body.String(), `"one"`) {
		t.Errorf("a view whose viewer left while waiting: %d %.200s; want 503 and no page", rec.Code, rec.Body)
	}
	<-h.renders // one view is done
	if _, body := get(t, h.serveJSON, "/fleetz.json"); !strings.Contains(body, `"one"`) {
		t.Errorf("the next view: %.200s", body)
	}
}

// blockedWriter is a viewer that reads nothing: Write waits for release.
type blockedWriter struct {
	header  http.Header
	writing chan struct{}
	release chan struct{}
}

func (w *blockedWriter) Header() http.Header { return w.header }
func (w *blockedWriter) WriteHeader(int)     {}
func (w *blockedWriter) Write(b []byte) (int, error) {
	close(w.writing)
	<-w.release
	return len(b), nil
}

// A viewer that does not read its page holds no render slot: every slot
// is let go once its page is rendered, and other views go on.
func TestFleetPageSlowViewersHoldNoSlot(t *testing.T) {
	srv := unstartedServer(t)
	addNamed(t, srv, "one", "/fleet/one.kubeconfig")
	h := newFleetPage(srv)
	slow := make([]*blockedWriter, 0, maxFleetRenders)
	for range maxFleetRenders {
		w := &blockedWriter{header: http.Header{}, writing: make(chan struct{}), release: make(chan struct{})}
		slow = append(slow, w)
		go h.serveJSON(w, httptest.NewRequest(http.MethodGet, "/fleetz.json", nil))
		<-w.writing
	}
	defer func() {
		for _, w := range slow {
			close(w.release)
		}
	}()
	done := make(chan string)
	go func() {
		rec := httptest.NewRecorder()
		h.serveJSON(rec, httptest.NewRequest(http.MethodGet, "/fleetz.json", nil))
		done <- rec.Body.String()
	}()
	select {
	case body := <-done:
		if !strings.Contains(body, `"one"`) {
			t.Errorf("the view: %.200s", body)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("a view waited 10 s while %d viewers did not read theirs", len(slow))
	}
}

// Views that are rendered and not read hold their pages: at most
// maxFleetPages are under way at once, and the next view waits until one
// of them is written (or its write times out), so that viewers who read
// nothing hold a few pages' memory however many connections they open.
func TestFleetPageBoundsThePagesHeld(t *testing.T) {
	srv := unstartedServer(t)
	addNamed(t, srv, "one", "/fleet/one.kubeconfig")
	h := newFleetPage(srv)
	slow := make([]*blockedWriter, 0, maxFleetPages)
	released := 0
	defer func() {
		for _, w := range slow[released:] {
			close(w.release)
		}
	}()
	for range maxFleetPages {
		w := &blockedWriter{header: http.Header{}, writing: make(chan struct{}), release: make(chan struct{})}
		slow = append(slow, w)
		go h.serveJSON(w, httptest.NewRequest(http.MethodGet, "/fleetz.json", nil))
		<-w.writing
	}
	done := make(chan string, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.serveJSON(rec, httptest.NewRequest(http.MethodGet, "/fleetz.json", nil))
		done <- rec.Body.String()
	}()
	select {
	case <-done:
		t.Fatalf("a view was served while %d pages were held by viewers who read nothing", maxFleetPages)
	case <-time.After(200 * time.Millisecond):
	}
	close(slow[0].release)
	released = 1
	select {
	case body := <-done:
		if !strings.Contains(body, `"one"`) {
			t.Errorf("the view: %.200s", body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a view still waited 10 s after a held page was written")
	}
}

// A HEAD request gets the page's headers without waiting for a render
// slot: it renders nothing.
func TestFleetPageHeadRendersNothing(t *testing.T) {
	srv := unstartedServer(t)
	addNamed(t, srv, "one", "/fleet/one.kubeconfig")
	h := newFleetPage(srv)
	for range maxFleetRenders {
		h.renders <- struct{}{} // views being rendered, for good
	}
	for _, serve := range []http.HandlerFunc{h.serveHTML, h.serveJSON} {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		rec := httptest.NewRecorder()
		serve(rec, httptest.NewRequest(http.MethodHead, "/fleetz", nil).WithContext(ctx))
		cancel()
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") == "" || rec.Header().Get("Content-Security-Policy") == "" || rec.Body.Len() != 0 {
			t.Errorf("HEAD with every render slot taken: %d, headers %v, %d bytes; want 200 with the page's headers and no body", rec.Code, rec.Header(), rec.Body.Len())
		}
	}
}

// The phase filter takes a phase in any case; a filter that names no
// phase is refused, naming the phases, rather than showing an empty fleet
// under the name it was given.
func TestFleetPagePhaseFilter(t *testing.T) {
	srv := unstartedServer(t)
	addNamed(t, srv, "one", "/fleet/one.kubeconfig")
	h := newFleetPage(srv)
	for _, q := range []string{"Pending", "pending", "PENDING"} {
		_, body := get(t, h.serveJSON, "/fleetz.json?phase="+q)
		if !strings.Contains(body, `"one"`) || !strings.Contains(body, `"phase": "Pending"`) {
			t.Errorf("phase=%s: %.300s; want the Pending member, filtered by Pending", q, body)
		}
	}
	if _, body := get(t, h.serveJSON, "/fleetz.json?phase=ready"); strings.Contains(body, `"one"`) {
		t.Errorf("phase=ready shows the Pending member: %.300s", body)
	}
	for _, q := range []string{"Bogus", "%3Cscript%3E", "Ready%20"} {
		rec := httptest.NewRecorder()
		h.serveHTML(rec, httptest.NewRequest(http.MethodGet, "/fleetz?phase="+q, nil))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), string(PhaseReady)) {
			t.Errorf("phase=%s: %d %q; want 400 naming the phases", q, rec.Code, rec.Body)
		}
		// The filter is quoted back as text, never as markup.
		if ct, nosniff := rec.Header().Get("Content-Type"), rec.Header().Get("X-Content-Type-Options"); !strings.HasPrefix(ct, "text/plain") || nosniff != "nosniff" {
			t.Errorf("phase=%s: answered as %q (X-Content-Type-Options %q); want text/plain, nosniff", q, ct, nosniff)
		}
	}
}
