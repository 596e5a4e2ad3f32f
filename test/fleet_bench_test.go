package test_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mccr-dev/mccr/test"
)

// BenchmarkStartFleet measures starting N API servers (kube-apiserver +
// etcd) at once, and the memory each pair holds once up.
func BenchmarkStartFleet(b *testing.B) {
	for _, n := range []int{1, 3, 6} {
		b.Run(fmt.Sprintf("servers=%d", n), func(b *testing.B) {
			var rss int64
			for i := 0; i < b.N; i++ {
				names := make([]string, n)
				for j := range names {
					names[j] = fmt.Sprintf("c%d", j)
				}
				before := childRSSKiB()
				begin := time.Now()
				f, err := test.Start(test.Options{}, names...)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(time.Since(begin).Seconds(), "s-to-start")
				rss = childRSSKiB() - before
				b.StopTimer()
				if err := f.Stop(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(rss)/float64(n)/1024, "MiB-rss/server")
		})
	}
}

// childRSSKiB sums the resident memory of this process's kube-apiserver and
// etcd children.
func childRSSKiB() int64 {
	entries, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	var total int64
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		var name, ppid string
		var rss int64
		for line := range strings.SplitSeq(string(raw), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			switch f[0] {
			case "Name:":
				name = f[1]
			case "PPid:":
				ppid = f[1]
			case "VmRSS:":
				rss, _ = strconv.ParseInt(f[1], 10, 64)
			}
		}
		if ppid == self && (name == "kube-apiserver" || name == "etcd") {
			total += rss
		}
	}
	return total
}
