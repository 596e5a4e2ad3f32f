package fleetz

import (
	"bufio"
	"html/template"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Title is the page's title; a test in a browser checks it is intact.
const Title = "mccr fleet"

// WriteHTML writes the page as one HTML document that needs no script and
// no other request: its style is inline, and it reloads itself (with the
// same filter and order) every p.Refresh.
func WriteHTML(w io.Writer, p *Page) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	if err := page.Execute(bw, view{p}); err != nil {
		return err
	}
	return bw.Flush()
}

// view adds what the template computes to a Page.
type view struct{ *Page }

func (v view) RefreshSeconds() int {
	return max(1, int(time.Duration(v.Refresh).Round(time.Second)/time.Second))
}

func (v view) SortLinks() []sortLink {
	out := make([]sortLink, 0, len(Sorts))
	for _, s := range Sorts {
		out = append(out, sortLink{Name: s, URL: Link(v.Phase, s), Current: s == v.Sort})
	}
	return out
}

func (v view) PhaseLinks() []phaseLink {
	out := make([]phaseLink, 0, len(v.Phases)+1)
	out = append(out, phaseLink{Phase: "all", Count: v.Total, URL: Link("", v.Sort), Current: v.Phase == ""})
	for _, pc := range v.Phases {
		out = append(out, phaseLink{Phase: pc.Phase, Count: pc.Count, URL: Link(pc.Phase, v.Sort), Current: v.Phase == pc.Phase})
	}
	return out
}

// Rows are the clusters as the table shows them: what the template would
// otherwise compute with a function call per cell (each one a reflective
// call, which at 10,000 rows is most of the time) is done here, and the
// template only escapes and places the text.
func (v view) Rows() []row {
	out := make([]row, len(v.Clusters))
	for i := range v.Clusters {
		c := &v.Clusters[i]
		r := &out[i]
		r.Name, r.Phase, r.Source, r.LastError, r.WaitingFor = c.Name, c.Phase, c.Source, c.LastError, c.WaitingFor
		r.SinceStamp, r.SinceAgo = stamp(c.Since), ago(c.Since, v.Generated)
		r.Reach = c.Reachable
		if !c.LastProbe.IsZero() {
			r.Reach += ", probed " + ago(c.LastProbe, v.Generated)
			if c.ProbeLatency > 0 {
				r.Reach += " (" + dur(c.ProbeLatency) + ")"
			}
		}
		r.Owner = c.Owner
		if r.Owner == "" {
			r.Owner = "this replica"
		}
		var retries []string
		if c.Failures > 0 {
			retries = append(retries, strconv.Itoa(c.Failures)+" failed")
		}
		if c.Restarts > 0 {
			retries = append(retries, strconv.Itoa(c.Restarts)+" restarts")
		}
		if !c.NextRetry.IsZero() {
			retries = append(retries, "next "+ago(c.NextRetry, v.Generated))
		}
		if c.TimeToReady > 0 {
			retries = append(retries, "ready in "+dur(c.TimeToReady))
		}
		r.Retries = strings.Join(retries, ", ")
		if len(c.Controllers) > 0 {
			r.Controllers = make([]string, len(c.Controllers))
			for j, cs := range c.Controllers {
				r.Controllers[j] = cs.Name + ": " + num(cs.Reconciles) + ", " + num(cs.Errors) + ", " + rate(cs.Rate)
			}
		}
		if len(c.Properties) > 0 {
			r.Properties = make([]string, 0, len(c.Properties))
			for _, k := range slices.Sorted(maps.Keys(c.Properties)) {
				r.Properties = append(r.Properties, k+"="+c.Properties[k])
			}
		}
	}
	return out
}

// row is one cluster's cells, as text; the template escapes each.
type row struct {
	Name, Phase, SinceStamp, SinceAgo, Reach, Source, Owner, LastError, Retries string
	Controllers, WaitingFor, Properties                                         []string
}

func ago(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t).Round(time.Second)
	if d < 0 {
		return "in " + (-d).String()
	}
	return d.String() + " ago"
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func rate(f *float64) string {
	if f == nil {
		return "–"
	}
	return strconv.FormatFloat(*f, 'f', 2, 64) + "/s"
}

func dur(d Duration) string {
	if d == 0 {
		return ""
	}
	return time.Duration(d).Round(time.Millisecond).String()
}

type sortLink struct {
	Name, URL string
	Current   bool
}

type phaseLink struct {
	Phase   string
	Count   int
	URL     string
	Current bool
}

var page = template.Must(template.New("fleetz").Funcs(template.FuncMap{
	"num": num, "rate": rate, "dur": dur, "stamp": stamp,
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="{{.RefreshSeconds}}">
<title>` + Title + `</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1em 2em;color:#222}
table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #ddd;padding:.3em .5em;text-align:left;vertical-align:top}
th{background:#f4f4f4}
td.err{color:#a00;white-space:pre-wrap;word-break:break-word;max-width:40em}
.phase-Ready{color:#070}.phase-Failed,.phase-Unreachable{color:#a00;font-weight:bold}
nav a{margin-right:1em}nav a.current{font-weight:bold;text-decoration:none;color:#222}
small{color:#666}ul{margin:0;padding-left:1.1em}
</style>
</head>
<body>
<h1>` + Title + `</h1>
<p id="replica">This replica: <b>{{.Replica.Role}}</b>{{with .Replica.Identity}} (identity <code>{{.}}</code>){{end}}.
{{.Total}} member clusters. Read {{stamp .Generated}}; this page reloads every {{.RefreshSeconds}}s. Also as <a href="fleetz.json{{with .Phase}}?phase={{.}}{{end}}">JSON</a>.</p>
<nav id="phases">Phase: {{range .PhaseLinks}}<a href="{{.URL}}"{{if .Current}} class="current"{{end}}>{{.Phase}} ({{.Count}})</a>{{end}}</nav>
<nav id="sorts">Sort by: {{range .SortLinks}}<a href="{{.URL}}"{{if .Current}} class="current"{{end}}>{{.Name}}</a>{{end}}</nav>
{{if .Controllers}}<h2>Controllers, all members</h2>
<table id="controllers">
<tr><th>controller</th><th>reconciles</th><th>errors</th><th>rate{{with dur .RateWindow}} <small>(over {{.}})</small>{{end}}</th><th>queue depth <small>(all members: controller-runtime's workqueue has no cluster label)</small></th></tr>
{{range .Controllers}}<tr><td>{{.Name}}</td><td>{{num .Reconciles}}</td><td>{{num .Errors}}</td><td>{{rate .Rate}}</td><td>{{with .QueueDepth}}{{num .}}{{else}}–{{end}}</td></tr>
{{end}}</table>{{end}}
<h2>Members{{with .Phase}} in phase {{.}}{{end}}: {{len .Clusters}}</h2>
<table id="clusters">
<tr><th>name</th><th>phase</th><th>since</th><th>reachable</th><th>source</th><th>owner</th><th>last error</th><th>retries</th><th>controllers <small>(reconciles, errors, rate)</small></th><th>waiting for kinds</th><th>properties</th></tr>
{{range .Rows}}<tr class="cluster" data-phase="{{.Phase}}">
<td class="name">{{.Name}}</td>
<td class="phase phase-{{.Phase}}">{{.Phase}}</td>
<td class="since" title="{{.SinceStamp}}">{{.SinceAgo}}</td>
<td class="reach">{{.Reach}}</td>
<td class="source">{{.Source}}</td>
<td class="owner">{{.Owner}}</td>
<td class="err">{{.LastError}}</td>
<td>{{.Retries}}</td>
<td>{{if .Controllers}}<ul>{{range .Controllers}}<li>{{.}}</li>{{end}}</ul>{{end}}</td>
<td>{{if .WaitingFor}}<ul>{{range .WaitingFor}}<li>{{.}}</li>{{end}}</ul>{{end}}</td>
<td>{{if .Properties}}<ul>{{range .Properties}}<li>{{.}}</li>{{end}}</ul>{{end}}</td>
</tr>
{{end}}</table>
</body>
</html>
`))
