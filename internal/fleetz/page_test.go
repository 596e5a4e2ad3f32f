package fleetz

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"slices"
	"strings"
	"testing"
	"time"
)

var hostile = []string{
	`<script>alert(1)</script>`,
	`"><img src=x onerror=alert(2)>`,
	`'quoted' "double" & ampersand`,
	"ünïcödé ☸ 東京 \u202eevil",
	`</td></tr></table><h1 id="injected">x</h1>`,
	`{{.Title}}`,
}

func hostilePage(now time.Time) *Page {
	one := 1.5
	p := &Page{
		Generated: now,
		Replica:   Replica{Role: "shard", Identity: `<b id="id-injected">r</b>`},
		Total:     len(hostile),
		Phases:    []PhaseCount{{Phase: "Ready", Count: len(hostile) - 1}, {Phase: "Failed", Count: 1}},
		Controllers: []ControllerTotals{{
			Name: `<i id="ctrl-injected">c</i>`, Reconciles: 7, Errors: 1, Rate: &one,
		}},
		Phase:   `"><script>alert(3)</script>`,
		Sort:    SortName,
		Refresh: Duration(10 * time.Second),
	}
	for i, name := range hostile {
		p.Clusters = append(p.Clusters, Cluster{
			Name: name, Phase: "Ready", Since: now.Add(-time.Duration(i) * time.Minute),
			Source:     "file " + name,
			Owner:      name,
			Reachable:  "yes",
			LastError:  "cluster " + name + `: <script>alert(4)</script> Get "https://10.0.0.1/api": x509`,
			WaitingFor: []string{name},
			Properties: map[string]string{name: name},
			Controllers: []ControllerStat{
				{Name: name, Reconciles: 3, Errors: 1, Rate: &one},
			},
		})
	}
	return p
}

// TestHTMLEscapesEverything renders outside names, errors, sources, owners,
// kinds, properties and controller names that try to become markup, and
// checks that each shows as its own text and adds no element.
func TestHTMLEscapesEverything(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var buf bytes.Buffer
	if err := WriteHTML(&buf, hostilePage(now)); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, bad := range []string{"<script", "<img", "<h1 id=\"injected\"", "<b id=", "<i id="} {
		if strings.Contains(out, bad) {
			t.Errorf("page holds raw %q:\n%s", bad, out)
		}
	}
	if n := strings.Count(out, "<title>"+Title+"</title>"); n != 1 {
		t.Errorf("title appears %d times, want once", n)
	}
	if n := strings.Count(out, `<tr class="cluster"`); n != len(hostile) {
		t.Errorf("%d cluster rows, want %d", n, len(hostile))
	}
	// Each name is shown as its text: unescaping the page gives it back.
	text := html.UnescapeString(out)
	for _, name := range hostile {
		if !strings.Contains(text, name) {
			t.Errorf("name %q is not shown as text", name)
		}
	}
	if !strings.Contains(out, `<meta http-equiv="refresh" content="10">`) {
		t.Error("page does not refresh itself every 10s")
	}
	// The filter, echoed into links, stays inside its attribute.
	if strings.Contains(out, `phase="><`) || strings.Contains(out, `phase=">`) {
		t.Errorf("filter breaks out of its attribute:\n%s", out)
	}
}

// TestJSONCarriesTheSameData decodes the JSON rendering and compares it
// with the page it came from.
func TestJSONCarriesTheSameData(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := hostilePage(now)
	var buf bytes.Buffer
	if err := WriteJSON(&buf, p); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Generated time.Time
		Replica   Replica
		Total     int
		Phases    []PhaseCount
		Clusters  []struct {
			Name, Phase, Source, Owner, Reachable, LastError string
			Since                                            time.Time
			WaitingFor                                       []string
			Controllers                                      []struct {
				Name               string
				Reconciles, Errors float64
				RatePerSecond      *float64
			}
		}
		Controllers []struct {
			Name          string
			RatePerSecond *float64
		}
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	if !got.Generated.Equal(now) || got.Replica != p.Replica || got.Total != p.Total || !slices.Equal(got.Phases, p.Phases) {
		t.Errorf("summary: got %+v", got)
	}
	if len(got.Clusters) != len(p.Clusters) {
		t.Fatalf("%d clusters, want %d", len(got.Clusters), len(p.Clusters))
	}
	for i, c := range got.Clusters {
		w := p.Clusters[i]
		if c.Name != w.Name || c.Phase != w.Phase || c.Source != w.Source || c.Owner != w.Owner || c.LastError != w.LastError ||
			c.Reachable != w.Reachable || !c.Since.Equal(w.Since) || !slices.Equal(c.WaitingFor, w.WaitingFor) {
			t.Errorf("cluster %d: got %+v, want %+v", i, c, w)
		}
		if len(c.Controllers) != 1 || c.Controllers[0].Reconciles != 3 || c.Controllers[0].Errors != 1 ||
			c.Controllers[0].RatePerSecond == nil || *c.Controllers[0].RatePerSecond != 1.5 {
			t.Errorf("cluster %d controllers: %+v", i, c.Controllers)
		}
	}
	if len(got.Controllers) != 1 || got.Controllers[0].RatePerSecond == nil {
		t.Errorf("controllers: %+v", got.Controllers)
	}
}

func TestSelect(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rows := func() []Cluster {
		return []Cluster{
			{Name: "b", Phase: "Failed", Since: t0.Add(1)},
			{Name: "a", Phase: "Ready", Since: t0.Add(3)},
			{Name: "c", Phase: "Ready", Since: t0.Add(2)},
			{Name: "d", Phase: "Odd", Since: t0},
		}
	}
	names := func(cs []Cluster) string {
		s := make([]string, 0, len(cs))
		for _, c := range cs {
			s = append(s, c.Name)
		}
		return strings.Join(s, ",")
	}
	phases := []string{"Pending", "Ready", "Failed"}
	for _, tc := range []struct{ phase, sort, want, used string }{
		{"", "", "a,b,c,d", SortName},
		{"", "nonsense", "a,b,c,d", SortName},
		{"", SortPhase, "a,c,b,d", SortPhase},
		{"", SortSince, "a,c,b,d", SortSince},
		{"Ready", SortSince, "a,c", SortSince},
		{"Failed", "", "b", SortName},
		{"<x>", "", "", SortName},
	} {
		got, used := Select(rows(), tc.phase, tc.sort, phases)
		if names(got) != tc.want || used != tc.used {
			t.Errorf("Select(%q, %q) = %s by %s, want %s by %s", tc.phase, tc.sort, names(got), used, tc.want, tc.used)
		}
	}
}

func TestLink(t *testing.T) {
	for _, tc := range []struct{ phase, sort, want string }{
		{"", "", "?"},
		{"", SortName, "?"},
		{"Failed", SortSince, "?phase=Failed&sort=since"},
		{"a&b=<c>", "", "?phase=a%26b%3D%3Cc%3E"},
	} {
		if got := Link(tc.phase, tc.sort); got != tc.want {
			t.Errorf("Link(%q, %q) = %q, want %q", tc.phase, tc.sort, got, tc.want)
		}
	}
}

// BenchmarkWriteHTML renders 10,000 members, each with two controllers.
func BenchmarkWriteHTML(b *testing.B) {
	now := time.Now()
	p := &Page{Generated: now, Total: 10000, Sort: SortName, Refresh: Duration(10 * time.Second)}
	r := 2.0
	for i := range 10000 {
		p.Clusters = append(p.Clusters, Cluster{
			Name: fmt.Sprintf("cluster-%05d", i), Phase: "Ready", Since: now.Add(-time.Hour), Reachable: "yes",
			Source:      fmt.Sprintf("file /etc/fleet/c%05d.kubeconfig, context c%05d", i, i),
			Controllers: []ControllerStat{{Name: "configmaps", Reconciles: 100, Rate: &r}, {Name: "secrets", Reconciles: 50, Errors: 2}},
		})
	}
	b.ReportAllocs()
	for b.Loop() {
		var buf bytes.Buffer
		if err := WriteHTML(&buf, p); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(buf.Len()))
	}
}
