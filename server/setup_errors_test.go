package server_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// lines is a logger's output, one entry per line.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, prefix+" "+args)
}

func (l *lines) matching(subs ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
next:
	for _, line := range l.all {
		for _, s := range subs {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}

// setupServer starts a Server whose retries come quickly, logging to log.
func setupServer(t *testing.T, ns string, log *lines) *server.Server {
	t.Helper()
	srv, err := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{
		Logger:                 funcr.New(log.add, funcr.Options{}),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
	}, func(o *server.Options) {
		o.Backoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Cap: 400 * time.Millisecond}
	})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// errNoWidgets is what a broken setup returns; its message quotes a
// credential, as an error from a client may.
var errNoWidgets = errors.New(`no matches for kind "Widget" (dialing https://admin:hunter2@widgets.example: password=hunter2)`)

// TestSetupErrorsSurface: a reconciler setup that returns an error on
// every member fails each of them, visibly: Status says so (LastError
// wraps ErrSetupFailed and the setup's own error, with the credential it
// quoted redacted), a log line with the cluster's name says so,
// mccr_cluster_setup_errors_total counts it, the member is retried with
// backoff, and SetupReadyCheck (and FleetReadyCheck) fail. Once the setup
// succeeds, the members come up and the check passes.
func TestSetupErrorsSurface(t *testing.T) {
	ns := testNamespace(t)
	log := &lines{}
	srv := setupServer(t, ns, log)
	var broken atomic.Bool
	broken.Store(true)
	r := &ConfigMapReconciler{Client: srv.GetClient(), rec: newTally(), name: "configmaps-" + ns}
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		if broken.Load() {
			return errNoWidgets
		}
		return r.SetupWithManager(mgr)
	})
	check := srv.SetupReadyCheck()
	if err := check(nil); err != nil {
		t.Fatalf("SetupReadyCheck before any member: %v", err)
	}
	names := []string{ns + "-a", ns + "-b"}
	for i, name := range names {
		if err := srv.Add(config.NewNamedConfig(name, fleet.Cluster(members[i]).Config)); err != nil {
			t.Fatal(err)
		}
	}
	test.Run(t, srv)

	for _, name := range names {
		test.Eventually(t, 30*time.Second, name+" retried after failed setups", func() bool {
			st, err := srv.Status(name)
			// A failure Status shows is counted already (every failure
			// here is a failed setup).
			if n := metricValue(t, "mccr_cluster_setup_errors_total", "cluster", name); err == nil && st.Failures > 0 && n < float64(st.Failures) {
				t.Errorf("%s: Status shows %d failures, mccr_cluster_setup_errors_total %v", name, st.Failures, n)
			}
			return err == nil && st.Failures >= 3
		})
		st, _ := srv.Status(name)
		if st.Phase != server.PhaseFailed && st.Phase != server.PhaseStarting {
			t.Errorf("%s is %s, want Failed (or Starting, retrying)", name, st.Phase)
		}
		if !errors.Is(st.LastError, server.ErrSetupFailed) || !errors.Is(st.LastError, errNoWidgets) {
			t.Errorf("%s: LastError = %v; want it to wrap ErrSetupFailed and the setup's error", name, st.LastError)
		}
		msg := st.LastError.Error()
		if !strings.Contains(msg, "reconciler setup #1") || !strings.Contains(msg, `kind "Widget"`) {
			t.Errorf("%s: LastError %q does not say which setup failed and why", name, msg)
		}
		if strings.Contains(msg, "hunter2") {
			t.Errorf("%s: LastError holds the credential: %q", name, msg)
		}
		if n := metricValue(t, "mccr_cluster_setup_errors_total", "cluster", name); n < 3 {
			t.Errorf("%s: mccr_cluster_setup_errors_total = %v, want at least 3", name, n)
		}
		if got := log.matching("reconciler setup failed on this cluster", `"cluster"="`+name+`"`, `kind \"Widget\"`); len(got) == 0 {
			t.Errorf("%s: no log line says its setup failed; lines: %q", name, log.matching(name))
		}
	}
	for _, l := range log.matching("hunter2") {
		t.Errorf("a log line holds the credential: %s", l)
	}
	err := check(nil)
	if err == nil || !errors.Is(err, server.ErrSetupFailed) || !strings.Contains(err.Error(), names[0]) {
		t.Errorf("SetupReadyCheck = %v, want a failure naming %s", err, names[0])
	}
	t.Logf("SetupReadyCheck: %v", err)
	if err := srv.FleetReadyCheck(1)(nil); err == nil {
		t.Error("FleetReadyCheck(1) passes with no member running")
	}

	broken.Store(false)
	waitReady(t, srv, names...)
	if err := check(nil); err != nil {
		t.Errorf("SetupReadyCheck once setups succeed: %v", err)
	}
	for _, name := range names {
		if st, _ := srv.Status(name); st.LastError != nil {
			t.Errorf("%s: LastError %v once Ready", name, st.LastError)
		}
	}
	createConfigMap(t, members[0], ns, "x")
	test.Eventually(t, 10*time.Second, "reconciled once the setup succeeds", func() bool { return ackIn(t, members[0], ns, "x") == names[0] })
}

// TestSetupReadyCheckFailsOnlyWhenEveryMemberFails: a setup that fails on
// one member only (here it panics there) fails that member, and the check
// passes while another member runs; once that one is gone, the check
// fails. A failing setup registered while every member runs fails them
// all, and the check with them.
func TestSetupReadyCheckFailsOnlyWhenEveryMemberFails(t *testing.T) {
	ns := testNamespace(t)
	log := &lines{}
	srv := setupServer(t, ns, log)
	good, bad := ns+"-good", ns+"-bad"
	badHost := fleet.Cluster(members[1]).Config.Host
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		if mgr.GetConfig().Host == badHost {
			panic("setup cannot handle " + mgr.GetConfig().Host)
		}
		return ctrl.NewControllerManagedBy(mgr).Named("ok-" + ns).For(&corev1.ConfigMap{}).Complete(&test.FirstReconcile{})
	})
	check := srv.SetupReadyCheck()
	if err := srv.Add(config.NewNamedConfig(good, fleet.Cluster(members[0]).Config)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Add(config.NewNamedConfig(bad, fleet.Cluster(members[1]).Config)); err != nil {
		t.Fatal(err)
	}
	test.Run(t, srv)
	waitReady(t, srv, good)
	test.Eventually(t, 30*time.Second, bad+" failed in its setup", func() bool {
		st, _ := srv.Status(bad)
		return st.Failures >= 2 && errors.Is(st.LastError, server.ErrSetupFailed) && strings.Contains(st.LastError.Error(), "panic: setup cannot handle")
	})
	if err := check(nil); err != nil {
		t.Errorf("SetupReadyCheck fails while %s runs: %v", good, err)
	}

	if err := srv.Delete(good); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 10*time.Second, "SetupReadyCheck fails once no member passes its setups", func() bool { return check(nil) != nil })
	if err := check(nil); !strings.Contains(fmt.Sprint(err), bad) {
		t.Errorf("SetupReadyCheck = %v, want it to name %s", err, bad)
	}

	// Back to a healthy fleet, then a setup that fails everywhere arrives
	// while it runs.
	if err := srv.Delete(bad); err != nil {
		t.Fatal(err)
	}
	if err := srv.Add(config.NewNamedConfig(good, fleet.Cluster(members[0]).Config)); err != nil {
		t.Fatal(err)
	}
	waitReady(t, srv, good)
	test.Eventually(t, 10*time.Second, "SetupReadyCheck passes again", func() bool { return check(nil) == nil })
	srv.AddReconcilerSetup(func(ctrl.Manager) error { return errNoWidgets })
	test.Eventually(t, 30*time.Second, "a late setup that fails everywhere fails the check", func() bool {
		err := check(nil)
		return err != nil && errors.Is(err, errNoWidgets)
	})
	st, _ := srv.Status(good)
	if !strings.Contains(st.LastError.Error(), "reconciler setup #2") {
		t.Errorf("LastError %v does not name the late setup", st.LastError)
	}
}
