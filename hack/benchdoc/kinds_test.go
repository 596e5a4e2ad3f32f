package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestParseFleet(t *testing.T) {
	for _, tc := range []struct {
		name             string
		ok               bool
		clusters, kinds  int
		endpoints, engin string
	}{
		{"BenchmarkFleet/clusters=100/endpoints=distinct/mccr", true, 100, 1, "distinct", "mccr"},
		{"BenchmarkFleet/clusters=1000/endpoints=shared/kinds=1/controller-runtime", true, 1000, 1, "shared", "controller-runtime"},
		{"BenchmarkFleet/clusters=100/endpoints=distinct/kinds=10/mccr", true, 100, 10, "distinct", "mccr"},
		{"BenchmarkFleet/clusters=100/endpoints=distinct/kinds=0/mccr", false, 0, 0, "", ""},
		{"BenchmarkFleet/clusters=100/endpoints=distinct/objects=10/mccr", false, 0, 0, "", ""},
		{"BenchmarkFleet/clusters=100/endpoints=distinct/kinds=10/mccr/more", false, 0, 0, "", ""},
		{"BenchmarkFleet/clusters=100/mccr", false, 0, 0, "", ""},
		{"BenchmarkSlowNetwork/latency=0ms/mccr", false, 0, 0, "", ""},
	} {
		r, ok := parseFleet(&series{name: tc.name})
		if ok != tc.ok {
			t.Errorf("%s: parsed %v, want %v", tc.name, ok, tc.ok)
			continue
		}
		if ok && (r.clusters != tc.clusters || r.kinds != tc.kinds || r.endpoints != tc.endpoints || r.engine != tc.engin) {
			t.Errorf("%s: %+v", tc.name, r)
		}
	}
}

// The per-kind figures come from the medians of the runs at one kind and at
// ten; rows of other fleets (1,000 clusters, shared endpoints) have no pair
// and make no table.
func TestWriteKinds(t *testing.T) {
	out := `pkg: github.com/mccr-dev/mccr/test/e2e
BenchmarkFleet/clusters=100/endpoints=distinct/kinds=1/mccr-2 1 1 ns/op 13.00 goroutines/cluster 300 KiB-rss/cluster
BenchmarkFleet/clusters=100/endpoints=distinct/kinds=1/mccr-2 1 1 ns/op 15.00 goroutines/cluster 500 KiB-rss/cluster
BenchmarkFleet/clusters=100/endpoints=distinct/kinds=1/mccr-2 1 1 ns/op 14.00 goroutines/cluster 400 KiB-rss/cluster
BenchmarkFleet/clusters=100/endpoints=distinct/kinds=1/controller-runtime-2 1 1 ns/op 28.00 goroutines/cluster 800 KiB-rss/cluster
BenchmarkFleet/clusters=100/endpoints=distinct/kinds=10/mccr-2 1 1 ns/op 59.00 goroutines/cluster 1300 KiB-rss/cluster
BenchmarkFleet/clusters=100/endpoints=distinct/kinds=10/controller-runtime-2 1 1 ns/op 127.00 goroutines/cluster 1700 KiB-rss/cluster
BenchmarkFleet/clusters=100/endpoints=shared/kinds=1/mccr-2 1 1 ns/op 12.00 goroutines/cluster 300 KiB-rss/cluster
BenchmarkFleet/clusters=1000/endpoints=distinct/mccr-2 1 1 ns/op 13.00 goroutines/cluster 200 KiB-rss/cluster
`
	all, _, err := parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	var w bytes.Buffer
	writeKinds(&w, fleetRuns(all))
	got := w.String()
	for _, want := range []string{
		"## Per kind (BenchmarkFleet, 100 clusters, endpoints distinct)",
		"| per idle cluster | engine | kinds=1 | kinds=10 | per extra kind |",
		"| goroutines | mccr | 14.00 | 59.00 | 5.00 |",
		"| goroutines | controller-runtime | 28.00 | 127 | 11.00 |",
		"| goroutines | mccr ÷ controller-runtime | 0.50× | 0.46× | 0.45× |",
		"| RSS (KiB) | mccr | 400 | 1300 | 100 |",
		"| RSS (KiB) | controller-runtime | 800 | 1700 | 100 |",
		"| RSS (KiB) | mccr ÷ controller-runtime | 0.50× | 0.76× | 1.00× |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	if n := strings.Count(got, "## Per kind"); n != 1 {
		t.Errorf("%d per-kind tables, want 1:\n%s", n, got)
	}
	if strings.Contains(got, "stacks") {
		t.Errorf("a row for a figure no run reported:\n%s", got)
	}
}

// A line a benchmark logged right after its name (go test prints the name
// first when the benchmark writes to its log) is not a result.
func TestParseSkipsLogLines(t *testing.T) {
	in := "pkg: example.com/p\n" +
		"BenchmarkA-2   \tE1126 12:00:00.000 event.go:1] \"x\" 0 UTC, 0 UTC,Series:nil\n" +
		"BenchmarkA-2   \t       1\t   5 ns/op\t  7 ms-x\n"
	order, _, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(order) != 1 || len(order[0].vals["ns/op"]) != 1 || len(order[0].units) != 2 {
		t.Fatalf("parsed %+v, want one series with one run of ns/op and ms-x", order[0])
	}
}
