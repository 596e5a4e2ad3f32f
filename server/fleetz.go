package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mccr-dev/mccr/internal/fleetz"
)

// The fleet page (Options.FleetPage) is served on the host Manager's
// metrics server, next to /metrics: it is a debugging view, off by default
// as controller-runtime's pprof is, and reachable by whoever can reach the
// metrics port — behind the same metricsserver.Options.FilterProvider
// (authentication and authorization) and SecureServing when they are set,
// since controller-runtime wraps every extra handler in that filter.
const (
	fleetPagePath = "/fleetz"
	fleetJSONPath = "/fleetz.json"
	// fleetRefresh is how often the HTML page reloads itself.
	fleetRefresh = 10 * time.Second
)

// phaseOrder lists the phases in lifecycle order: the summary counts and
// the phase sort follow it.
var phaseOrder = []Phase{PhasePending, PhaseQueued, PhaseStarting, PhaseSyncing, PhaseReady, PhaseUnreachable, PhaseFailed, PhaseStopping, PhaseStopped, PhaseElsewhere}

// maxFleetRenders bounds the views of the page rendered at once (some 60
// MB allocated to render one at 10,000 members); views beyond it wait
// their turn. A slot is let go once the page is rendered, before it is
// written.
const maxFleetRenders = 2

// maxFleetPages bounds the views under way at once, from their render to
// the end of their write (up to fleetWriteTimeout for a viewer that does
// not read): a rendered page is some 5 MB at 10,000 members, and viewers
// that never read their pages would otherwise hold as many as they open
// connections. Views beyond it wait their turn, as for a render slot.
const maxFleetPages = 8

func (s *Server) mountFleetPage() error {
	h := newFleetPage(s)
	if err := s.host.AddMetricsServerExtraHandler(fleetPagePath, http.HandlerFunc(h.serveHTML)); err != nil {
		return err
	}
	return s.host.AddMetricsServerExtraHandler(fleetJSONPath, http.HandlerFunc(h.serveJSON))
}

// fleetPage serves the page. It keeps nothing about clusters: each view
// reads Statuses (the clusters' own records) and the mccr_reconcile_
// series afresh; the only state is the earlier reading of the counters
// that rates are measured against, and a reading of the queue depths that
// views share for a few seconds.
type fleetPage struct {
	s       *Server
	rates   rateBase
	depths  queueDepths
	renders chan struct{} // a slot per view being rendered
	pages   chan struct{} // a slot per view under way, rendered or written
}

func newFleetPage(s *Server) *fleetPage {
	return &fleetPage{s: s, renders: make(chan struct{}, maxFleetRenders), pages: make(chan struct{}, maxFleetPages)}
}

func (h *fleetPage) serveHTML(w http.ResponseWriter, r *http.Request) {
	h.serve(w, r, "text/html; charset=utf-8", fleetz.WriteHTML)
}

func (h *fleetPage) serveJSON(w http.ResponseWriter, r *http.Request) {
	h.serve(w, r, "application/json", fleetz.WriteJSON)
}

func (h *fleetPage) serve(w http.ResponseWriter, r *http.Request, contentType string, write func(io.Writer, *fleetz.Page) error) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	phase, ok := phaseFilter(q.Get("phase"))
	if !ok {
		http.Error(w, fmt.Sprintf("unknown phase %q; the phases are %v", q.Get("phase"), phaseOrder), http.StatusBadRequest)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", contentType)
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	// Escaping keeps outside names from becoming markup; this keeps any
	// markup from running or loading anything, should escaping ever fail.
	hdr.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; form-action 'none'")
	if r.Method == http.MethodHead {
		return // the headers are the same whatever the fleet: nothing to render
	}
	if !h.take(r.Context(), h.pages) {
		busy(w)
		return
	}
	defer func() { <-h.pages }()
	buf, err := h.render(r, write, phase, q.Get("sort"))
	switch {
	case errors.Is(err, errViewerLeft):
		busy(w)
		return
	case err != nil:
		http.Error(w, "rendering the fleet page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	// A viewer that does not read holds its page and a page slot, not a
	// render slot, and not for long: the metrics server sets no write
	// timeout of its own.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(fleetWriteTimeout))
	_, _ = w.Write(buf.Bytes())
}

// busy answers a view that left (or whose server stopped) before it got
// its turn; nobody may be there to read it.
func busy(w http.ResponseWriter) {
	hdr := w.Header()
	hdr.Del("Content-Type")
	hdr.Set("Retry-After", "1")
	http.Error(w, "fleet page: the view ended before its turn", http.StatusServiceUnavailable)
}

// phaseFilter returns the phase a view's filter names, ignoring case
// ("" for none), and whether it names one.
func phaseFilter(q string) (Phase, bool) {
	if q == "" {
		return "", true
	}
	for _, ph := range phaseOrder {
		if strings.EqualFold(q, string(ph)) {
			return ph, true
		}
	}
	return "", false
}

// fleetWriteTimeout bounds how long a view's page may take to write.
const fleetWriteTimeout = 30 * time.Second

// errViewerLeft is why a view was not rendered: its request's context
// ended while it waited for its turn.
var errViewerLeft = errors.New("the viewer left")

// take takes a slot of slots, waiting its turn; false when ctx ends first.
func (h *fleetPage) take(ctx context.Context, slots chan struct{}) bool {
	select {
	case slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// render renders one view in one of the render slots, and lets go of the
// slot before the page is written. It renders nothing when the viewer
// leaves while it waits for a slot.
func (h *fleetPage) render(r *http.Request, write func(io.Writer, *fleetz.Page) error, phase Phase, sortBy string) (*bytes.Buffer, error) {
	if !h.take(r.Context(), h.renders) {
		return nil, errViewerLeft
	}
	defer func() { <-h.renders }()
	var buf bytes.Buffer
	err := write(&buf, h.page(time.Now(), string(phase), sortBy))
	return &buf, err
}

// page gathers one view of the fleet at now.
func (h *fleetPage) page(now time.Time, phase, sortBy string) (p *fleetz.Page) {
	// The rows copy what they show of each status (the maps and slices
	// they share are published ones, never changed): the buffer goes back
	// to the pool when the page is gathered.
	h.s.withStatuses(func(statuses []ClusterStatus) { p = h.pageOf(now, statuses, phase, sortBy) })
	return p
}

// pageOf is page, of statuses.
func (h *fleetPage) pageOf(now time.Time, statuses []ClusterStatus, phase, sortBy string) *fleetz.Page {
	counts := readReconcileCounts(statuses)
	window, rates := h.rates.rates(now, counts)

	p := &fleetz.Page{
		Generated:  now,
		Replica:    h.s.replica(),
		Total:      len(statuses),
		RateWindow: fleetz.Duration(window),
		Phase:      phase,
		Refresh:    fleetz.Duration(fleetRefresh),
	}
	perPhase := make(map[Phase]int, len(phaseOrder))
	rows := make([]fleetz.Cluster, 0, len(statuses))
	for _, st := range statuses {
		perPhase[st.Phase]++
		if phase != "" && string(st.Phase) != phase {
			continue
		}
		rows = append(rows, clusterRow(st, counts.byCluster[st.Name], rates))
	}
	for _, ph := range phaseOrder {
		if n := perPhase[ph]; n > 0 {
			p.Phases = append(p.Phases, fleetz.PhaseCount{Phase: string(ph), Count: n})
		}
	}
	names := make([]string, len(phaseOrder))
	for i, ph := range phaseOrder {
		names[i] = string(ph)
	}
	p.Clusters, p.Sort = fleetz.Select(rows, "", sortBy, names)
	p.Controllers = controllerTotals(counts, rates, h.depths.read(now))
	return p
}

func clusterRow(st ClusterStatus, ctrls map[string]reconcileCount, rates map[seriesKey]float64) fleetz.Cluster {
	row := fleetz.Cluster{
		Name:        st.Name,
		Phase:       string(st.Phase),
		Since:       st.Since,
		Source:      st.Source.String(),
		Owner:       st.Owner,
		NextRetry:   st.NextRetry,
		Failures:    st.Failures,
		Restarts:    st.Restarts,
		TimeToReady: fleetz.Duration(st.TimeToReady),
		WaitingFor:  st.WaitingFor,
		Properties:  st.Properties,
	}
	row.Reachable, row.LastProbe, row.ProbeLatency = reachability(st), st.LastProbe, fleetz.Duration(st.ProbeLatency)
	if st.LastError != nil {
		row.LastError = st.LastError.Error() // redacted by the cluster record
	}
	for _, name := range sortedKeys(ctrls) {
		c := ctrls[name]
		cs := fleetz.ControllerStat{Name: name, Reconciles: c.total, Errors: c.errors}
		if r, ok := rates[seriesKey{st.Name, name}]; ok {
			cs.Rate = &r
		}
		row.Controllers = append(row.Controllers, cs)
	}
	return row
}

// reachability says whether the member's API server answers: as its last
// probe found, or, before any probe, as far as its phase tells (a Ready or
// Syncing member's does, an Unreachable one's does not, other phases do
// not say).
func reachability(st ClusterStatus) string {
	switch {
	case !st.LastProbe.IsZero() && st.Reachable:
		return "yes"
	case !st.LastProbe.IsZero():
		return "no"
	case st.Phase == PhaseReady || st.Phase == PhaseSyncing:
		return "yes"
	case st.Phase == PhaseUnreachable:
		return "no"
	}
	return "unknown"
}

// replica says what this process is in the fleet.
func (s *Server) replica() fleetz.Replica {
	switch {
	case s.env.sharded:
		return fleetz.Replica{Role: "shard", Identity: s.env.opts.Sharding.Identity}
	case !s.env.memberOpts.LeaderElection:
		return fleetz.Replica{Role: "single"}
	}
	select {
	case <-s.host.Elected():
		return fleetz.Replica{Role: "leader"}
	default:
		return fleetz.Replica{Role: "standby"}
	}
}

// rateBase is the reading of the reconcile counters that rates are
// measured against. It is replaced once it is older than rateMaxWindow, so
// a rate covers between one page refresh and rateMaxWindow plus one.
type rateBase struct {
	mu     sync.Mutex
	at     time.Time
	totals map[seriesKey]float64
}

const (
	rateMinWindow = time.Second
	rateMaxWindow = 30 * time.Second
)

// rates returns each series' reconciles per second since the base reading
// and the window they cover (zero, with no rates, when there is no base
// reading old enough yet). A series that is new or went down since (its
// cluster was deleted and added again) has no rate.
func (b *rateBase) rates(now time.Time, cur reconcileCounts) (time.Duration, map[seriesKey]float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var (
		window time.Duration
		out    map[seriesKey]float64
	)
	if b.totals != nil {
		window = now.Sub(b.at)
		if window >= rateMinWindow {
			out = make(map[seriesKey]float64, len(cur.byCluster))
			for cl, ctrls := range cur.byCluster {
				for ctrl, c := range ctrls {
					k := seriesKey{cl, ctrl}
					if was, ok := b.totals[k]; ok && c.total >= was {
						out[k] = (c.total - was) / window.Seconds()
					}
				}
			}
		} else {
			window = 0
		}
	}
	if b.totals == nil || now.Sub(b.at) >= rateMaxWindow {
		b.at = now
		b.totals = make(map[seriesKey]float64, len(cur.byCluster))
		for cl, ctrls := range cur.byCluster {
			for ctrl, c := range ctrls {
				b.totals[seriesKey{cl, ctrl}] = c.total
			}
		}
	}
	return window, out
}
