package main

import (
	"fmt"
	"io"
	"strconv"
)

// kindFigures are the per-cluster figures of the "Per kind" table, with
// their headings.
var kindFigures = []struct{ unit, heading string }{
	{"goroutines/cluster", "goroutines"},
	{"KiB-rss/cluster", "RSS (KiB)"},
	{"KiB-heap/cluster", "Go heap (KiB)"},
	{"KiB-stack/cluster", "stacks (KiB)"},
}

// kindsPair is one engine's two runs on one fleet (clusters, endpoints):
// with the controller on one kind, and on the most kinds it ran with.
type kindsPair struct {
	one, more fleetRun
}

// perExtraKind is what one more kind costs a cluster: the difference of
// the two runs' medians over the kinds between them. No single run
// measures it: a process runs one controller.
func (p kindsPair) perExtraKind(unit string) (float64, bool) {
	a, okA := p.one.medianOf(unit)
	b, okB := p.more.medianOf(unit)
	return (b - a) / float64(p.more.kinds-p.one.kinds), okA && okB
}

// kindsPairs pairs, per fleet (clusters, endpoints) in runs' order, every
// engine's run at one kind with its run at the most kinds, if it has one.
func kindsPairs(runs []fleetRun) (fleets [][]kindsPair) {
	type fleetKey struct {
		clusters  int
		endpoints string
	}
	at := map[fleetKey]int{}
	for _, one := range runs {
		if one.kinds != 1 {
			continue
		}
		p := kindsPair{one: one}
		for _, r := range runs {
			if r.clusters == one.clusters && r.endpoints == one.endpoints && r.engine == one.engine && r.kinds > max(p.more.kinds, 1) {
				p.more = r
			}
		}
		if p.more.s == nil {
			continue
		}
		k := fleetKey{one.clusters, one.endpoints}
		i, seen := at[k]
		if !seen {
			i = len(fleets)
			at[k] = i
			fleets = append(fleets, nil)
		}
		fleets[i] = append(fleets[i], p)
	}
	return fleets
}

// writeKinds writes, for every fleet run with the controller on one kind
// and on more, what one more watched kind costs an idle cluster per engine:
// the figures of both runs, their difference per kind added, and mccr's
// figures as a multiple of controller-runtime's.
func writeKinds(w io.Writer, runs []fleetRun) {
	for _, pairs := range kindsPairs(runs) {
		first := pairs[0].one
		fmt.Fprintf(w, "## Per kind (BenchmarkFleet, %d clusters, endpoints %s)\n\n", first.clusters, first.endpoints)
		fmt.Fprintln(w, "What one more watched kind costs an idle cluster: the figure with the controller on more kinds minus the figure on one kind, over the kinds added, from the medians of the two rows above (a run measures one or the other, never both).")
		fmt.Fprintln(w)
		kinds := pairs[0].more.kinds
		fmt.Fprintf(w, "| per idle cluster | engine | kinds=1 | kinds=%d | per extra kind |\n", kinds)
		fmt.Fprintln(w, "|---|---|---|---|---|")
		for _, f := range kindFigures {
			var mccr, plain *kindsPair
			for i := range pairs {
				p := &pairs[i]
				one, okOne := p.one.medianOf(f.unit)
				more, okMore := p.more.medianOf(f.unit)
				extra, ok := p.perExtraKind(f.unit)
				if !okOne || !okMore || !ok {
					continue
				}
				switch p.one.engine {
				case "mccr":
					mccr = p
				case "controller-runtime":
					plain = p
				}
				moreCell := format(more)
				if p.more.kinds != kinds {
					moreCell += fmt.Sprintf(" (kinds=%d)", p.more.kinds)
				}
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", f.heading, p.one.engine, format(one), moreCell, format(extra))
			}
			if mccr == nil || plain == nil || mccr.more.kinds != plain.more.kinds {
				continue
			}
			m1, _ := mccr.one.medianOf(f.unit)
			c1, _ := plain.one.medianOf(f.unit)
			mk, _ := mccr.more.medianOf(f.unit)
			ck, _ := plain.more.medianOf(f.unit)
			me, _ := mccr.perExtraKind(f.unit)
			ce, _ := plain.perExtraKind(f.unit)
			fmt.Fprintf(w, "| %s | mccr ÷ controller-runtime | %s | %s | %s |\n", f.heading, times(m1, c1), times(mk, ck), times(me, ce))
		}
		fmt.Fprintln(w)
	}
}

// times is a as a multiple of b.
func times(a, b float64) string {
	if b == 0 {
		return ""
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64) + "×"
}
