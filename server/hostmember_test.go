package server_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// TestHostMember: with Options.HostMember, the host cluster is a member of
// that name, so a migrated operator keeps reconciling the cluster it runs
// in, next to the others, each write landing where it belongs; the name
// is the Server's own, refused to Add, Update, Delete and to watchers.
func TestHostMember(t *testing.T) {
	ns := testNamespace(t)
	r := startServer(t, ns, nil, func(o *server.Options) { o.HostMember = "home" })
	addReady(t, r.srv, "m1")
	waitReady(t, r.srv, "home")

	createConfigMap(t, "host", ns, "on-host")
	createConfigMap(t, "m1", ns, "on-m1")
	test.Eventually(t, 15*time.Second, "the host's object reconciled as member home", func() bool {
		return ackIn(t, "host", ns, "on-host") == "home"
	})
	test.Eventually(t, 15*time.Second, "m1's object reconciled in m1", func() bool { return ackIn(t, "m1", ns, "on-m1") == "m1" })
	if got := ackIn(t, "m1", ns, "on-host"); got != "" {
		t.Errorf("the host's object acknowledged in m1 (%q)", got)
	}
	st, err := r.srv.Status("home")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st.Source.String(), "HostMember") {
		t.Errorf("Status(home).Source = %q, want it to name the host", st.Source.String())
	}

	other := config.NewNamedConfig("home", fleet.Cluster("m2").Config)
	if err := r.srv.Add(other); !errors.Is(err, server.ErrClusterNameTaken) {
		t.Errorf("Add(home) = %v, want ErrClusterNameTaken", err)
	}
	if err := r.srv.Update(other); !errors.Is(err, server.ErrClusterNameTaken) {
		t.Errorf("Update(home) = %v, want ErrClusterNameTaken", err)
	}
	if err := r.srv.Delete("home"); !errors.Is(err, server.ErrClusterNameTaken) || !strings.Contains(err.Error(), "HostMember") {
		t.Errorf("Delete(home) = %v, want ErrClusterNameTaken naming Options.HostMember", err)
	}
	w := newChanWatcher()
	r.srv.Watch(w)
	w.events <- configwatcher.Event{Type: configwatcher.Added, Config: other}
	test.Eventually(t, 10*time.Second, "a watcher's home refused", func() bool {
		for _, we := range r.srv.WatchErrors() {
			if errors.Is(we.Err, server.ErrClusterNameTaken) {
				return true
			}
		}
		return false
	})
	w.events <- configwatcher.Event{Type: configwatcher.Deleted, Config: other}
	// Still the host, still running.
	createConfigMap(t, "host", ns, "after")
	test.Eventually(t, 15*time.Second, "the host still reconciled as home", func() bool { return ackIn(t, "host", ns, "after") == "home" })
}

// TestHostMemberBadName: a HostMember that no member could be called is
// refused by NewServer, naming the option.
func TestHostMemberBadName(t *testing.T) {
	for _, name := range []string{"a\nb", "nul\x00", strings.Repeat("x", config.MaxNameLength+1), "\x1b[31mred"} {
		_, err := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{Logger: test.Logger(t), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"}, func(o *server.Options) { o.HostMember = name })
		if !errors.Is(err, config.ErrInvalidName) || !strings.Contains(err.Error(), "HostMember") {
			t.Errorf("HostMember %q: NewServer = %v, want ErrInvalidName naming Options.HostMember", name, err)
		}
	}
}
