package server_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// TestTwoWatchersOneName: two watchers sending the same cluster name — a
// Secret and a Cluster API Cluster both called "east", say — never take it
// from each other: the first keeps it, the second gets an error naming
// both, and the second's latest config takes over only when the first
// deletes the cluster.
func TestTwoWatchersOneName(t *testing.T) {
	srv, _ := fakeServer(t, nil, configMapController("cms"))
	fa, fb := fakeMember(t), fakeMember(t)
	a, b := newChanWatcher(), newChanWatcher()
	srv.Watch(a)
	srv.Watch(b)
	named := func(cfgHost string, src string, agent string) *config.NamedConfig {
		var cfg = fa.Config()
		if cfgHost == "b" {
			cfg = fb.Config()
		}
		cfg.UserAgent = agent
		nc := config.NewNamedConfig("east", cfg)
		nc.Source = config.Source{Object: src}
		return nc
	}
	fromA, fromB := "Secret team-a/east", "Cluster team-b/east"
	source := func() string {
		st, err := srv.Status("east")
		if err != nil {
			return err.Error()
		}
		return st.Source.Object
	}
	taken := func(n int) func() bool {
		return func() bool {
			count := 0
			for _, we := range srv.WatchErrors() {
				msg := we.Err.Error()
				if errors.Is(we.Err, server.ErrClusterNameTaken) && strings.Contains(msg, "team-a/east") && strings.Contains(msg, "team-b/east") {
					count++
				}
			}
			return count >= n
		}
	}

	a.events <- configwatcher.Event{Type: configwatcher.Added, Config: named("a", fromA, "a1")}
	waitPhase(t, srv, "east", server.PhaseReady)
	b.events <- configwatcher.Event{Type: configwatcher.Added, Config: named("b", fromB, "b1")}
	test.Eventually(t, 10*time.Second, "the second watcher's claim refused, naming both", taken(1))
	b.events <- configwatcher.Event{Type: configwatcher.Updated, Config: named("b", fromB, "b2")}
	test.Eventually(t, 10*time.Second, "the second watcher's update refused too", taken(2))
	if got := source(); got != fromA {
		t.Fatalf("east is fed by %q, want %q", got, fromA)
	}
	st, _ := srv.Status("east")
	if st.Restarts != 0 {
		t.Errorf("the refused claims restarted east %d times", st.Restarts)
	}

	// The first watcher lets go: the second's latest config takes over.
	a.events <- configwatcher.Event{Type: configwatcher.Deleted, Config: &config.NamedConfig{Name: "east"}}
	test.Eventually(t, 10*time.Second, "the waiting watcher takes over", func() bool { return source() == fromB })
	waitPhase(t, srv, "east", server.PhaseReady)
	mgr, err := srv.GetManager("east")
	if err != nil {
		t.Fatal(err)
	}
	if ua := mgr.GetConfig().UserAgent; ua != "b2" {
		t.Errorf("east runs with the config of user agent %q, want the newest one the waiting watcher sent (b2)", ua)
	}

	// Now the first watcher waits; a Deleted from it changes nothing.
	a.events <- configwatcher.Event{Type: configwatcher.Added, Config: named("a", fromA, "a2")}
	test.Eventually(t, 10*time.Second, "the first watcher's claim refused now", taken(3))
	b.events <- configwatcher.Event{Type: configwatcher.Deleted, Config: &config.NamedConfig{Name: "east"}}
	test.Eventually(t, 10*time.Second, "the first watcher takes it back", func() bool { return source() == fromA })
	a.events <- configwatcher.Event{Type: configwatcher.Deleted, Config: &config.NamedConfig{Name: "east"}}
	test.Eventually(t, 10*time.Second, "east gone once no watcher has it", func() bool {
		_, err := srv.Status("east")
		return errors.Is(err, server.ErrClusterNotFound)
	})
}
