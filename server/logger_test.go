package server_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// jsonLog keeps the JSON lines of a logger, as maps.
type jsonLog struct {
	mu    sync.Mutex
	lines []map[string]any
}

func (l *jsonLog) logger(name string) logr.Logger {
	return funcr.NewJSON(func(obj string) {
		var m map[string]any
		if err := json.Unmarshal([]byte(obj), &m); err != nil {
			m = map[string]any{"unparsed": obj}
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, m)
	}, funcr.Options{}).WithName(name)
}

// find returns the first line whose msg is msg.
func (l *jsonLog) find(msg string) map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.lines {
		if m["msg"] == msg {
			return m
		}
	}
	return nil
}

// TestReconcilerLogsAsControllerRuntime: a line a member reconciler logs
// through log.FromContext carries the logger name and keys a plain
// controller-runtime Manager gives it (the user's logger, the controller's
// name), with the member's name added as "cluster" — mccr's own name is
// not on it.
func TestReconcilerLogsAsControllerRuntime(t *testing.T) {
	ns := testNamespace(t)
	createConfigMap(t, "m1", ns, "logged")
	setup := func(name string) func(ctrl.Manager) error {
		return func(mgr ctrl.Manager) error {
			return ctrl.NewControllerManagedBy(mgr).Named(name).For(&corev1.ConfigMap{}).
				Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
					if req.Name == "logged" {
						log.FromContext(ctx).Info("reconciling " + name)
					}
					return reconcile.Result{}, nil
				}))
		}
	}
	opts := func(l logr.Logger) ctrl.Options {
		return ctrl.Options{
			Logger:                 l,
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
			Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		}
	}

	// What controller-runtime alone logs, on the same cluster.
	var plain jsonLog
	mgr, err := ctrl.NewManager(fleet.Cluster("m1").Config, opts(plain.logger("app")))
	if err != nil {
		t.Fatal(err)
	}
	if err := setup("plain-" + ns)(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	test.Eventually(t, 30*time.Second, "the plain Manager's reconciler to log", func() bool { return plain.find("reconciling plain-"+ns) != nil })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	var member jsonLog
	srv, err := server.NewServer(fleet.Cluster("host").Config, opts(member.logger("app")))
	if err != nil {
		t.Fatal(err)
	}
	srv.AddReconcilerSetup(setup("member-" + ns))
	stop := test.Run(t, srv)
	addReady(t, srv, "m1")
	test.Eventually(t, 30*time.Second, "the member's reconciler to log", func() bool { return member.find("reconciling member-"+ns) != nil })
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	want, got := plain.find("reconciling plain-"+ns), member.find("reconciling member-"+ns)
	if got["logger"] != want["logger"] {
		t.Errorf("a member reconciler's line is named %q, controller-runtime names it %q", got["logger"], want["logger"])
	}
	if got["cluster"] != "m1" {
		t.Errorf("a member reconciler's line has cluster %v, want m1", got["cluster"])
	}
	for key := range want {
		switch key {
		case "msg", "reconcileID", "controller", "ts":
			continue
		}
		if _, ok := got[key]; !ok {
			t.Errorf("a member reconciler's line lacks %q, which controller-runtime's has: %v", key, got)
		}
	}
	if got["controller"] != "member-"+ns {
		t.Errorf("a member reconciler's line names controller %v, want %s", got["controller"], "member-"+ns)
	}
	for key := range got {
		if _, ok := want[key]; !ok && key != "cluster" {
			t.Errorf("a member reconciler's line has %q, which controller-runtime's has not: %v", key, got)
		}
	}
	// mccr's own lines about the member still say who wrote them.
	if l := member.find("cluster ready"); l == nil || l["logger"] != "app/mccr" || l["cluster"] != "m1" {
		t.Errorf("mccr's line on the member's readiness: %v, want it named app/mccr with cluster m1", l)
	}
}
