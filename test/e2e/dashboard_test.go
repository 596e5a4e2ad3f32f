package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// dashboardPath is the Grafana dashboard shipped for operators.
const dashboardPath = "../../docs/grafana/mccr-fleet.json"

// controllerRuntimeFamilies are the families (name → type) controller-runtime
// v0.25 registers in its metrics registry whatever the program does. A
// scrape shows a family only once it has a series (a queue created, a
// request made, leader election on), so these count as exported even when
// this test's run did not happen to create one.
var controllerRuntimeFamilies = map[string]string{
	// pkg/internal/controller/metrics
	"controller_runtime_reconcile_total":                 "counter",
	"controller_runtime_reconcile_errors_total":          "counter",
	"controller_runtime_terminal_reconcile_errors_total": "counter",
	"controller_runtime_reconcile_panics_total":          "counter",
	"controller_runtime_reconcile_time_seconds":          "histogram",
	"controller_runtime_max_concurrent_reconciles":       "gauge",
	"controller_runtime_active_workers":                  "gauge",
	"controller_runtime_reconcile_timeouts_total":        "counter",
	// pkg/metrics/workqueue.go
	"workqueue_depth":                             "gauge",
	"workqueue_adds_total":                        "counter",
	"workqueue_queue_duration_seconds":            "histogram",
	"workqueue_work_duration_seconds":             "histogram",
	"workqueue_unfinished_work_seconds":           "gauge",
	"workqueue_longest_running_processor_seconds": "gauge",
	"workqueue_retries_total":                     "counter",
	// pkg/metrics/client_go_adapter.go
	"rest_client_requests_total": "counter",
	// pkg/metrics/leaderelection.go
	"leader_election_master_status":  "gauge",
	"leader_election_slowpath_total": "counter",
}

// TestDashboardNamesExportedMetrics checks that every query of the Grafana
// dashboard (panel targets and template variables) names only metrics the
// project exports: those a running, sharded Server serves on its metrics
// endpoint after reconciles, a reconcile error and a handover, plus
// controller-runtime's own families.
func TestDashboardNamesExportedMetrics(t *testing.T) {
	queries := dashboardQueries(t, dashboardPath)
	if len(queries) < 10 {
		t.Fatalf("found %d queries in %s; the dashboard or its reading is broken", len(queries), dashboardPath)
	}
	used := map[string]bool{}
	named := make([][]string, len(queries))
	for i, q := range queries {
		names, err := metricNames(q.expr)
		if err != nil {
			t.Errorf("%s: %v in %q", q.where, err, q.expr)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: no metric named in %q", q.where, q.expr)
		}
		named[i] = names
		for _, n := range names {
			used[n] = true
		}
	}
	withControllerRuntime := func(scraped map[string]string) map[string]string {
		for n, typ := range controllerRuntimeFamilies {
			if _, ok := scraped[n]; !ok {
				scraped[n] = typ
			}
		}
		return scraped
	}
	// Series appear as the run goes on (a probe, a handover): scrape until
	// every name the dashboard uses is served, or for a bounded time, and
	// then judge the last scrape.
	exported := withControllerRuntime(scrapeExported(t, func(scraped map[string]string) bool {
		scraped = withControllerRuntime(scraped)
		for n := range used {
			if !exportedName(scraped, n) {
				return false
			}
		}
		return true
	}))
	for i, q := range queries {
		for _, n := range named[i] {
			if !exportedName(exported, n) {
				t.Errorf("%s: %s is not a metric the project exports (query %q)", q.where, n, q.expr)
			}
		}
	}
	// Every mccr_ family should have a place on the dashboard.
	for n := range exported {
		if !strings.HasPrefix(n, "mccr_") {
			continue
		}
		if !used[n] && !used[n+"_bucket"] && !used[n+"_sum"] && !used[n+"_count"] {
			t.Errorf("the dashboard shows no panel over %s", n)
		}
	}
}

// exportedName says whether a name in a query is an exported series: a
// family, or a histogram's _bucket, _sum or _count.
func exportedName(exported map[string]string, name string) bool {
	if typ, ok := exported[name]; ok {
		return typ != "histogram" // a histogram has no series of its bare name
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && exported[base] == "histogram" {
			return true
		}
	}
	return false
}

type dashboardQuery struct {
	where string // panel title, or template variable
	expr  string
}

// dashboardQueries reads every PromQL expression of a Grafana dashboard:
// the targets of each panel (rows' nested panels too) and the queries of
// template variables (label_values(metric, label) gives its metric).
func dashboardQueries(t *testing.T, path string) []dashboardQuery {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []dashboardQuery
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, r := range ps {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("%s: panel: %v", path, err)
			}
			for _, tg := range p.Targets {
				out = append(out, dashboardQuery{where: fmt.Sprintf("panel %q", p.Title), expr: tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			// Older dashboards keep the query as a plain string.
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				t.Fatalf("%s: variable %s: %v", path, v.Name, err)
			}
		}
		expr := q.Query
		if inner, ok := strings.CutPrefix(expr, "label_values("); ok {
			// label_values(metric, label): the metric (with its matchers)
			// is the query; the label is no metric.
			if i := strings.LastIndex(inner, ","); i >= 0 {
				expr = inner[:i]
			} else {
				expr = strings.TrimSuffix(inner, ")")
			}
		}
		out = append(out, dashboardQuery{where: fmt.Sprintf("variable %q", v.Name), expr: expr})
	}
	return out
}

// promKeywords are PromQL's words that are not metric names when not
// followed by '('.
var promKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"inf": true, "nan": true,
}

// aggregations may put by/without between their name and '('.
var aggregations = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

// labelListKeywords are followed by a parenthesised list of label names.
var labelListKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// metricNames returns the metric names in a PromQL expression: identifiers
// that are not functions (followed by '('), keywords, label names (inside
// {…} or after by/without/on/ignoring/group_left/group_right), strings,
// durations ([…]), numbers or Grafana variables ($x, ${x}).
func metricNames(expr string) ([]string, error) {
	var names []string
	isIdentStart := func(c byte) bool { return c == '_' || c == ':' || (c|0x20) >= 'a' && (c|0x20) <= 'z' }
	isIdent := func(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
	skipSpace := func(i int) int {
		for i < len(expr) && strings.IndexByte(" \t\r\n", expr[i]) >= 0 {
			i++
		}
		return i
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			end := i + 1
			for end < len(expr) && expr[end] != c {
				if expr[end] == '\\' && c != '`' {
					end++
				}
				end++
			}
			if end >= len(expr) {
				return nil, errors.New("unterminated string")
			}
			i = end + 1
		case c == '{', c == '[':
			// Label matchers or a range/subquery duration: no metric
			// names inside (strings there may hold braces).
			closing := map[byte]byte{'{': '}', '[': ']'}[c]
			j := i + 1
			for j < len(expr) && expr[j] != closing {
				if q := expr[j]; q == '"' || q == '\'' || q == '`' {
					j++
					for j < len(expr) && expr[j] != q {
						if expr[j] == '\\' && q != '`' {
							j++
						}
						j++
					}
				}
				j++
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unclosed %q", string(c))
			}
			i = j + 1
		case c == '$':
			// A Grafana variable: $name or ${name}.
			i++
			if i < len(expr) && expr[i] == '{' {
				for i < len(expr) && expr[i] != '}' {
					i++
				}
				i++
				continue
			}
			for i < len(expr) && isIdent(expr[i]) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isIdent(expr[i]) || expr[i] == '.') {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(expr) && isIdent(expr[j]) {
				j++
			}
			word := expr[i:j]
			next := skipSpace(j)
			switch {
			case labelListKeywords[strings.ToLower(word)]:
				if next < len(expr) && expr[next] == '(' {
					end := strings.IndexByte(expr[next:], ')')
					if end < 0 {
						return nil, fmt.Errorf("unclosed label list after %s", word)
					}
					j = next + end + 1
				}
			case next < len(expr) && expr[next] == '(', aggregations[strings.ToLower(word)]:
				// A function or an aggregation.
			case promKeywords[strings.ToLower(word)]:
			default:
				names = append(names, word)
			}
			i = j
		default:
			i++
		}
	}
	return names, nil
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`sum by (cluster) (rate(mccr_reconcile_total{cluster=~"$cluster", result="error"}[$__rate_interval]))`, []string{"mccr_reconcile_total"}},
		{`histogram_quantile(0.99, sum by (le, controller) (rate(a_bucket[5m])))`, []string{"a_bucket"}},
		{`count(max by (cluster) (x{c="}{by(y)"}) == 0) / on(cluster) group_left(zone) y offset 5m`, []string{"x", "y"}},
		{`sum(a) without (pod) > bool 1 and b unless c or d`, []string{"a", "b", "c", "d"}},
		{`topk(5, m) * 1e3 + ${var} - 0x1f + Inf`, []string{"m"}},
		{`sum(rate(q[1m:30s]))`, []string{"q"}},
		{`max by (cluster) (r) == 0`, []string{"r"}},
		{`count without(a) (s)`, []string{"s"}},
	} {
		got, err := metricNames(tc.expr)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q) = %q, %v; want %q", tc.expr, got, err, tc.want)
		}
	}
	for _, bad := range []string{`x{a="b"`, `rate(x[5m)`, `x{a="b}`} {
		if _, err := metricNames(bad); err == nil {
			t.Errorf("metricNames(%q) took a malformed query", bad)
		}
	}
}

// scrapeExported runs what an operator runs — a sharded Server whose
// reconciler succeeds and fails, and a second replica that takes the
// clusters over — and returns the families (name → type) its metrics
// endpoint serves once enough reports that they are all there, or after
// half a minute of scrapes without that.
func scrapeExported(t *testing.T, enough func(map[string]string) bool) map[string]string {
	t.Helper()
	ns := namespace(t, "dashboard")
	names := []string{"dash-a", "dash-b"}
	rec := &failingReconciler{}
	replica := func(id string) (addr string, stop func() error) {
		addr = test.FreeAddress(t)
		srv, err := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{
			Logger:                  test.Logger(t).WithValues("replica", id),
			Metrics:                 metricsserver.Options{BindAddress: addr},
			HealthProbeBindAddress:  "0",
			Cache:                   cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
			GracefulShutdownTimeout: ptr.To(500 * time.Millisecond),
		}, server.WithSharding(server.ShardingOptions{
			Identity: id, Namespace: ns, Group: "dashboard-test",
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
		}))
		if err != nil {
			t.Fatal(err)
		}
		srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
			return ctrl.NewControllerManagedBy(mgr).Named("dashboard").For(&corev1.ConfigMap{}).Complete(rec)
		})
		for i, n := range names {
			if err := srv.Add(config.NewNamedConfig(n, fleet.Cluster(members[i%len(members)]).Config)); err != nil {
				t.Fatal(err)
			}
		}
		// A watcher with a broken kubeconfig: a watcher error to count.
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "broken.kubeconfig"), []byte("clusters: [not a kubeconfig"), 0o600); err != nil {
			t.Fatal(err)
		}
		w, err := configwatcher.NewFileWatcher(dir)
		if err != nil {
			t.Fatal(err)
		}
		srv.Watch(w)
		return addr, test.Run(t, srv)
	}

	_, stopFirst := replica("dash-r1")
	ctx := context.Background()
	for _, m := range members[:2] {
		cl := adminClient(t, m)
		for _, name := range []string{"fine", "fail"} {
			if err := cl.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	test.Eventually(t, time.Minute, "reconciles and errors in both clusters", func() bool { return rec.seen(2) })
	// A graceful stop releases the Leases; the next replica takes them
	// over, which is a handover.
	if err := stopFirst(); err != nil {
		t.Fatal(err)
	}
	addr, _ := replica("dash-r2")
	var families map[string]string
	test.Eventually(t, time.Minute, "the second replica to take the clusters over", func() bool {
		var err error
		families, err = scrape("http://" + addr + "/metrics")
		if err != nil {
			t.Logf("scrape: %v", err)
			return false
		}
		_, handover := families["mccr_shard_unowned_seconds"]
		return handover
	})
	for deadline := time.Now().Add(30 * time.Second); !enough(maps.Clone(families)) && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		if f, err := scrape("http://" + addr + "/metrics"); err == nil {
			families = f
		}
	}
	return families
}

// failingReconciler succeeds on every ConfigMap but "fail", on which it
// returns an error; seen says whether it has done both in n clusters.
type failingReconciler struct {
	mu       sync.Mutex
	fine     map[string]bool
	failures map[string]bool
}

func (r *failingReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster, _ := known.ClusterFrom(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fine == nil {
		r.fine, r.failures = map[string]bool{}, map[string]bool{}
	}
	if req.Name == "fail" {
		r.failures[cluster] = true
		return ctrl.Result{}, fmt.Errorf("ConfigMap %s in cluster %s fails on purpose", req.NamespacedName, cluster)
	}
	r.fine[cluster] = true
	return ctrl.Result{}, nil
}

func (r *failingReconciler) seen(n int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.fine) >= n && len(r.failures) >= n
}

// scrape reads the families a Prometheus text endpoint serves, from its
// "# TYPE name type" lines.
func scrape(url string) (map[string]string, error) {
	cl := &http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	families := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			families[f[2]] = f[3]
		}
	}
	return families, sc.Err()
}

func TestExportedName(t *testing.T) {
	exported := map[string]string{"h_seconds": "histogram", "c_total": "counter", "g": "gauge"}
	for name, want := range map[string]bool{
		"h_seconds_bucket": true, "h_seconds_sum": true, "h_seconds_count": true,
		"h_seconds": false, // a histogram has no series of its bare name
		"c_total":   true, "c_total_bucket": false, "g": true, "g_count": false, "missing": false,
	} {
		if got := exportedName(exported, name); got != want {
			t.Errorf("exportedName(%q) = %v, want %v", name, got, want)
		}
	}
}
