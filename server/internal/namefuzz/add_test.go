package namefuzz

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/fakeapi"
	"github.com/mccr-dev/mccr/internal/fuzzcheck"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// FuzzAddName adds a cluster of a fuzzed name to a running Server, whose
// member is a fake API server, and deletes it again. Names reach metric
// labels, log lines, Status and the fan-out client's routes, and the
// Prometheus client panics on a label that is not UTF-8 (an Argo CD
// Secret whose name was "evil-\xff\xfe" once took a process down). So:
//
//   - a name config.ValidateName refuses is refused by Add with an error
//     wrapping server.ErrInvalidConfig and config.ErrInvalidName, printable
//     as one line, and leaves no trace (no status, no route, no series);
//   - any other name joins: it shows in ClusterNames and Status, its
//     member gets Ready, its metric series exist and the registry gathers,
//     and Delete removes every trace of it;
//   - nothing panics.
func FuzzAddName(f *testing.F) {
	for _, name := range []string{
		"east", "evil-\xff\xfe", "a\u202eb", " x", "x ", "", "a\nb", "kind-kind", "admin@east",
		"arn:aws:eks:eu-west-1:123456789012:cluster/prod", "ns/name", "Ωmega-クラスタ", "\xc0\x80",
	} {
		f.Add(name)
	}

	ctrl.SetLogger(logr.Discard()) // the Managers' own logger, when they stop
	host, member := fakeapi.New(), fakeapi.New()
	host.Start()
	member.Start()
	f.Cleanup(host.Close)
	f.Cleanup(member.Close)
	srv, err := server.NewServer(host.Config(), ctrl.Options{
		Logger:                 logr.Discard(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		f.Fatal(err)
	}
	test.Run(f, srv)
	memberCfg := member.Config()

	f.Fuzz(func(t *testing.T, name string) {
		nc := config.NewNamedConfig(name, memberCfg)
		nc.Source = config.Source{Object: "FuzzAddName"}
		err := srv.Add(nc)
		if config.ValidateName(name) != nil {
			if !errors.Is(err, server.ErrInvalidConfig) || !errors.Is(err, config.ErrInvalidName) {
				t.Fatalf("Add(%q) = %v, want ErrInvalidConfig wrapping config.ErrInvalidName", name, err)
			}
			if err := fuzzcheck.OneLine(err.Error()); err != nil {
				t.Fatal(err)
			}
			if _, err := srv.Status(name); !errors.Is(err, server.ErrClusterNotFound) {
				t.Fatalf("Status of refused %q: %v", name, err)
			}
			if slices.Contains(srv.ClusterNames(), name) {
				t.Fatalf("refused %q is routed", name)
			}
			if series(t, name) != 0 {
				t.Fatalf("refused %q has metric series", name)
			}
			return
		}
		if err != nil {
			t.Fatalf("Add(%q): %v", name, err)
		}
		if !slices.Contains(srv.ClusterNames(), name) {
			t.Fatalf("%q is not among ClusterNames %q", name, srv.ClusterNames())
		}
		test.Eventually(t, 30*time.Second, "member "+config.QuoteName(name)+" Ready", func() bool {
			st, err := srv.Status(name)
			if err != nil || st.Name != name {
				t.Fatalf("Status(%q) = %+v, %v", name, st, err)
			}
			return st.Phase == server.PhaseReady
		})
		if series(t, name) == 0 {
			t.Fatalf("%q has no metric series", name)
		}
		if err := srv.Delete(name); err != nil {
			t.Fatalf("Delete(%q): %v", name, err)
		}
		if _, err := srv.Status(name); !errors.Is(err, server.ErrClusterNotFound) {
			t.Fatalf("Status of deleted %q: %v", name, err)
		}
		if slices.Contains(srv.ClusterNames(), name) || series(t, name) != 0 {
			t.Fatalf("deleted %q is still routed or has metric series", name)
		}
	})
}

// series counts the metric series labelled cluster=name; the registry
// must gather whatever names it holds.
func series(t *testing.T, name string) int {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	n := 0
	for _, fam := range families {
		for _, m := range fam.GetMetric() {
			if slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "cluster" && l.GetValue() == name }) {
				n++
			}
		}
	}
	return n
}
