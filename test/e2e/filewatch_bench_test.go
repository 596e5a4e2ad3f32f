package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// BenchmarkFileWriteToReconcile measures, for a kubeconfig file dropped into
// a watched directory, the time until the FileWatcher emits Added and the
// time until the new cluster's first Reconcile (through Server.Watch).
func BenchmarkFileWriteToReconcile(b *testing.B) {
	ns := namespace(b, "filewatch")
	configMaps(b, "a", ns, 1)
	dir := b.TempDir()

	f := &test.FirstReconcile{}
	srv, err := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{
		Logger:                 logr.Discard(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultFieldSelector: fields.OneTermEqualSelector("metadata.namespace", ns)},
	})
	if err != nil {
		b.Fatal(err)
	}
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("filewatch").For(&corev1.ConfigMap{}).Complete(f)
	})
	feed, err := configwatcher.NewFileWatcher(dir)
	if err != nil {
		b.Fatal(err)
	}
	srv.Watch(feed)
	observer, err := configwatcher.NewFileWatcher(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer observer.Stop()
	test.Run(b, srv)

	src := fleet.Cluster("a")
	var toEvent, toReconcile []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("dropped-%d", i)
		path := filepath.Join(dir, name+".kubeconfig")
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := test.WriteKubeconfig(tmp, name, src.Config); err != nil {
			b.Fatal(err)
		}
		begin := time.Now()
		if err := os.Rename(tmp, path); err != nil {
			b.Fatal(err)
		}
		waitEvent(b, observer, configwatcher.Added, name)
		toEvent = append(toEvent, time.Since(begin))
		select {
		case <-f.Seen(name):
		case <-time.After(time.Minute):
			b.Fatalf("no reconcile in %s", name)
		}
		toReconcile = append(toReconcile, time.Since(begin))

		b.StopTimer()
		if err := os.Remove(path); err != nil {
			b.Fatal(err)
		}
		waitEvent(b, observer, configwatcher.Deleted, name)
		test.Eventually(b, 30*time.Second, name+" removed", func() bool {
			_, err := srv.Status(name)
			return err != nil
		})
		b.StartTimer()
	}
	b.ReportMetric(ms(median(toEvent)), "ms-p50-write-to-event")
	b.ReportMetric(ms(median(toReconcile)), "ms-p50-write-to-reconcile")
}

func waitEvent(b *testing.B, w configwatcher.ConfigWatcher, typ configwatcher.EventType, name string) {
	b.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev := <-w.Events():
			if ev.Type == typ && ev.Config.Name == name {
				return
			}
		case <-timeout:
			b.Fatalf("no %s event for %s", typ, name)
		}
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
