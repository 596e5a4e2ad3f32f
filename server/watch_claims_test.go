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

// TestHandAddedNameIsKept: a name given to Server.Add is the program's
// own. A watcher's config for it — a kubeconfig Secret named like it,
// pointing elsewhere — is refused with ErrClusterNameTaken naming both
// sources, and the running cluster keeps its config, its source and its
// Manager. Add, Update and Delete by hand of a name a watcher feeds are
// refused the same way. Once the hand-added cluster is deleted, the
// waiting watcher's config takes over.
func TestHandAddedNameIsKept(t *testing.T) {
	srv, _ := fakeServer(t, nil, configMapController("cms"))
	mine, theirs := fakeMember(t), fakeMember(t)
	w := newChanWatcher()
	srv.Watch(w)
	cfgMine := mine.Config()
	cfgMine.UserAgent = "mine"
	if err := srv.Add(config.NewNamedConfig("payments", cfgMine)); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, srv, "payments", server.PhaseReady)
	before, err := srv.GetManager("payments")
	if err != nil {
		t.Fatal(err)
	}

	cfgTheirs := theirs.Config()
	cfgTheirs.UserAgent = "theirs"
	forged := config.NewNamedConfig("payments", cfgTheirs)
	forged.Source = config.Source{Object: "Secret team-x/payments"}
	refused := func(n int) func() bool {
		return func() bool {
			c := 0
			for _, we := range srv.WatchErrors() {
				msg := we.Err.Error()
				if errors.Is(we.Err, server.ErrClusterNameTaken) && strings.Contains(msg, "Secret team-x/payments") && strings.Contains(msg, "Server.Add") {
					c++
				}
			}
			return c >= n
		}
	}
	for i, typ := range []configwatcher.EventType{configwatcher.Added, configwatcher.Updated} {
		w.events <- configwatcher.Event{Type: typ, Config: forged}
		test.Eventually(t, 10*time.Second, "the watcher's "+typ.String()+" refused, naming both sources", refused(i+1))
	}
	// A watcher's Deleted of a name it does not feed changes nothing.
	w.events <- configwatcher.Event{Type: configwatcher.Deleted, Config: &config.NamedConfig{Name: "payments"}}
	w.events <- configwatcher.Event{Type: configwatcher.Added, Config: config.NewNamedConfig("fed", theirs.Config())}
	waitPhase(t, srv, "fed", server.PhaseReady) // the events above were applied
	st, err := srv.Status("payments")
	if err != nil {
		t.Fatal(err)
	}
	if st.Source.Object != "" || st.Restarts != 0 || st.Phase != server.PhaseReady {
		t.Fatalf("payments: source %v, %d restarts, phase %s; want the hand-added one, untouched", st.Source, st.Restarts, st.Phase)
	}
	if mgr, _ := srv.GetManager("payments"); mgr != before || mgr.GetConfig().UserAgent != "mine" {
		t.Fatal("payments' Manager was replaced")
	}

	// The reverse: a name the watcher feeds is not the program's to change.
	for call, f := range map[string]func() error{
		"Add":    func() error { return srv.Add(config.NewNamedConfig("fed", mine.Config())) },
		"Update": func() error { return srv.Update(config.NewNamedConfig("fed", mine.Config())) },
		"Delete": func() error { return srv.Delete("fed") },
	} {
		if err := f(); !errors.Is(err, server.ErrClusterNameTaken) {
			t.Errorf("%s of a watcher's name = %v, want ErrClusterNameTaken", call, err)
		}
	}
	waitPhase(t, srv, "fed", server.PhaseReady)

	// The program lets go of its name: the watcher's config, sent again
	// after its Deleted above withdrew it, takes over.
	w.events <- configwatcher.Event{Type: configwatcher.Updated, Config: forged}
	test.Eventually(t, 10*time.Second, "the watcher's claim refused again", refused(3))
	if err := srv.Delete("payments"); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 10*time.Second, "the waiting watcher's config takes over", func() bool {
		st, err := srv.Status("payments")
		return err == nil && st.Source.Object == "Secret team-x/payments"
	})
	waitPhase(t, srv, "payments", server.PhaseReady)
}

// TestStoppedWatcherLetsGoOfItsNames: a watcher whose channels close (it
// stopped by itself) keeps its clusters running, but its names are no
// longer its own: Delete and Add by hand, or another watcher, may take them.
func TestStoppedWatcherLetsGoOfItsNames(t *testing.T) {
	srv, _ := fakeServer(t, nil, configMapController("cms"))
	m := fakeMember(t)
	w := newChanWatcher()
	srv.Watch(w)
	nc := config.NewNamedConfig("orphan", m.Config())
	nc.Source = config.Source{Object: "Secret ns/orphan"}
	w.events <- configwatcher.Event{Type: configwatcher.Added, Config: nc}
	waitPhase(t, srv, "orphan", server.PhaseReady)
	if err := srv.Delete("orphan"); !errors.Is(err, server.ErrClusterNameTaken) {
		t.Fatalf("Delete of a running watcher's name = %v, want ErrClusterNameTaken", err)
	}
	w.Stop()
	test.Eventually(t, 10*time.Second, "the stopped watcher's name can be deleted by hand", func() bool {
		err := srv.Delete("orphan")
		return err == nil
	})
	if err := srv.Add(config.NewNamedConfig("orphan", m.Config())); err != nil {
		t.Fatalf("Add after the watcher stopped: %v", err)
	}
	waitPhase(t, srv, "orphan", server.PhaseReady)
}
