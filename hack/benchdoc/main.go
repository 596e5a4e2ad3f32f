// Command benchdoc turns `go test -bench` output (several -count runs) into
// the Markdown tables of docs/benchmarks.md: per benchmark and unit, the
// median over the runs, with the machine and the command that produced it;
// first, the fleet-scale figures (BenchmarkFleet) side by side, and what one
// more watched kind costs a cluster.
//
//	go test -run '^$' -bench . -benchmem -count 5 ./... | go run ./hack/benchdoc -cmd "..." > docs/benchmarks.md
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

type series struct {
	pkg   string
	name  string
	units []string
	vals  map[string][]float64
}

func main() {
	cmd := flag.String("cmd", "", "the command whose output is read, for the record")
	notes := flag.String("notes", "", "a Markdown file appended after the table")
	flag.Parse()

	order, cpu, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	write(os.Stdout, cpu, *cmd, order)
	if *notes != "" {
		raw, err := os.ReadFile(*notes)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stdout, "\n%s", raw)
	}
}

// parse reads `go test -bench` output: the series in the order they first
// appear, and the machine's CPU as go test names it.
func parse(r io.Reader) (order []*series, cpu string, err error) {
	var pkg string
	byName := map[string]*series{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "cpu: "):
			cpu = strings.TrimPrefix(line, "cpu: ")
		case strings.HasPrefix(line, "pkg: "):
			pkg = strings.TrimPrefix(line, "pkg: ")
		case strings.HasPrefix(line, "Benchmark"):
			// A result line is the name, the iterations, then value and
			// unit pairs; a log line the benchmark printed after its name
			// (go test writes the name first when the benchmark logs) is
			// not one.
			f := strings.Fields(line)
			if len(f) < 4 {
				continue
			}
			if _, err := strconv.Atoi(f[1]); err != nil {
				continue
			}
			name := trimProcs(f[0])
			key := pkg + " " + name
			s, ok := byName[key]
			if !ok {
				s = &series{pkg: pkg, name: name, vals: map[string][]float64{}}
				byName[key] = s
				order = append(order, s)
			}
			for i := 2; i+1 < len(f); i += 2 {
				v, err := strconv.ParseFloat(f[i], 64)
				if err != nil {
					continue
				}
				unit := f[i+1]
				if _, seen := s.vals[unit]; !seen {
					s.units = append(s.units, unit)
				}
				s.vals[unit] = append(s.vals[unit], v)
			}
		}
	}
	return order, cpu, sc.Err()
}

// trimProcs drops the -GOMAXPROCS suffix go test adds to names.
func trimProcs(name string) string {
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			return name[:i]
		}
	}
	return name
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func write(w io.Writer, cpu, cmd string, all []*series) {
	fmt.Fprintln(w, "# Benchmarks")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Written by `make bench`; do not edit by hand. Each figure is the median over the runs shown.")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- date: %s\n", time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintf(w, "- machine: %s, %d CPUs, %s/%s, %s\n", cpu, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, memTotal())
	fmt.Fprintf(w, "- go: %s\n", runtime.Version())
	if cmd != "" {
		fmt.Fprintf(w, "- command: `%s`\n", cmd)
	}
	fmt.Fprintln(w)
	runs := fleetRuns(all)
	writeScale(w, runs)
	writeKinds(w, runs)
	fmt.Fprintln(w, "## All figures")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| package | benchmark | runs | figures (median) |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, s := range all {
		parts := make([]string, 0, len(s.units))
		runs := 0
		for _, u := range s.units {
			parts = append(parts, fmt.Sprintf("%s %s", format(median(s.vals[u])), u))
			runs = max(runs, len(s.vals[u]))
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s |\n", strings.TrimPrefix(s.pkg, "github.com/mccr-dev/mccr/"), s.name, runs, strings.Join(parts, ", "))
	}
}

func format(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func memTotal() string {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "memory unknown"
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return fmt.Sprintf("%.0f GiB RAM", kb/1024/1024)
		}
	}
	return "memory unknown"
}

// fleetRun is a BenchmarkFleet series:
// BenchmarkFleet/clusters=N/endpoints=distinct|shared/kinds=K/engine, or
// without kinds=K (one kind), as the benchmark named its runs before it
// had more.
type fleetRun struct {
	clusters  int
	endpoints string
	kinds     int
	engine    string
	s         *series
}

func parseFleet(s *series) (fleetRun, bool) {
	parts := strings.Split(s.name, "/")
	if len(parts) < 4 || len(parts) > 5 || parts[0] != "BenchmarkFleet" {
		return fleetRun{}, false
	}
	n, err := strconv.Atoi(strings.TrimPrefix(parts[1], "clusters="))
	ep, ok := strings.CutPrefix(parts[2], "endpoints=")
	if err != nil || !ok {
		return fleetRun{}, false
	}
	r := fleetRun{clusters: n, endpoints: ep, kinds: 1, engine: parts[len(parts)-1], s: s}
	if len(parts) == 5 {
		k, ok := strings.CutPrefix(parts[3], "kinds=")
		if !ok {
			return fleetRun{}, false
		}
		if r.kinds, err = strconv.Atoi(k); err != nil || r.kinds < 1 {
			return fleetRun{}, false
		}
	}
	return r, true
}

// fleetRuns returns the BenchmarkFleet series, clusters behind endpoints of
// their own (as N real clusters are) first: those are the headline. Then
// by clusters, kinds, and mccr before controller-runtime.
func fleetRuns(all []*series) []fleetRun {
	var runs []fleetRun
	for _, s := range all {
		if r, ok := parseFleet(s); ok {
			runs = append(runs, r)
		}
	}
	slices.SortStableFunc(runs, func(a, b fleetRun) int {
		if a.endpoints != b.endpoints {
			return boolOrder(a.endpoints != "distinct", b.endpoints != "distinct")
		}
		if a.clusters != b.clusters {
			return a.clusters - b.clusters
		}
		if a.kinds != b.kinds {
			return a.kinds - b.kinds
		}
		return boolOrder(a.engine != "mccr", b.engine != "mccr")
	})
	return runs
}

// medianOf is the median of r's figure in unit, if r reported it.
func (r fleetRun) medianOf(unit string) (float64, bool) {
	v, ok := r.s.vals[unit]
	if !ok || len(v) == 0 {
		return 0, false
	}
	return median(v), true
}

// scaleColumns are the BenchmarkFleet units shown side by side, with
// their headings.
var scaleColumns = []struct{ unit, heading string }{
	{"KiB-rss/cluster", "RSS / idle cluster (KiB)"},
	{"KiB-heap/cluster", "Go heap / idle cluster (KiB)"},
	{"goroutines/cluster", "goroutines / idle cluster"},
	{"KiB-stack/cluster", "stacks / idle cluster (KiB)"},
	{"s-all-reconciled", "registered → all reconciled (s)"},
	{"ms-p50-first-reconcile", "register → first Reconcile, p50 (ms)"},
	{"ms-p99-first-reconcile", "p99 (ms)"},
	{"MiB-rss/100-more-clusters", "RSS growth / 100 more clusters (MiB)"},
}

// writeScale writes the fleet-scale figures, one row per run of the
// benchmark (in fleetRuns' order).
func writeScale(w io.Writer, runs []fleetRun) {
	if len(runs) == 0 {
		return
	}
	fmt.Fprintln(w, "## A fleet of clusters (BenchmarkFleet)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Endpoints *distinct*: every cluster behind a loopback endpoint of its own, so that the engine sees as many API servers as clusters (the headline figures). *Shared*: names straight on the three API servers, which share connections and REST mappers. *Kinds*: how many kinds the controller watches (ConfigMaps alone, or with the nine kinds it Owns).")
	fmt.Fprintln(w)
	head := []string{"clusters", "endpoints", "kinds", "engine", "runs"}
	for _, c := range scaleColumns {
		head = append(head, c.heading)
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(head, " | "))
	fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(head)))
	for _, r := range runs {
		row := []string{strconv.Itoa(r.clusters), r.endpoints, strconv.Itoa(r.kinds), r.engine, ""}
		runs := 0
		for _, c := range scaleColumns {
			v, ok := r.s.vals[c.unit]
			if !ok {
				row = append(row, "")
				continue
			}
			runs = max(runs, len(v))
			row = append(row, format(median(v)))
		}
		row[4] = strconv.Itoa(runs)
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
	fmt.Fprintln(w)
}

func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
