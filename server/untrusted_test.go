package server_test

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// hostileNames are names an attacker can put in a Secret's data, a file's
// context or a ClusterProfile: each must be refused, and nothing else may
// suffer.
var hostileNames = []string{
	"evil-\xff\xfe",
	"east\xff",
	"a\nfake log line",
	"bell\x07",
	"nul\x00",
	"esc\x1b[2J",
	"rtl\u202eexe.gpj",
	"zw\u200bsp",
	" padded",
	strings.Repeat("x", config.MaxNameLength+1),
	"",
}

// TestAddRefusesHostileNames: Server.Add, with or without a source, refuses
// every hostile name with ErrInvalidConfig and config.ErrInvalidName; the
// Server goes on serving the fleet it has, and its metrics, Status and
// ClusterNames keep working (one such name used to panic the process in
// the metrics registry).
func TestAddRefusesHostileNames(t *testing.T) {
	srv, _ := fakeServer(t, nil, configMapController("cms"))
	good := fakeMember(t)
	if err := srv.Add(config.NewNamedConfig("good", good.Config())); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, srv, "good", server.PhaseReady)
	for _, name := range hostileNames {
		nc := config.NewNamedConfig(name, good.Config())
		nc.Source = config.Source{Object: "Secret argocd/hostile"}
		err := srv.Add(nc)
		if !errors.Is(err, server.ErrInvalidConfig) || !errors.Is(err, config.ErrInvalidName) {
			t.Errorf("Add(%q) = %v, want ErrInvalidConfig wrapping ErrInvalidName", name, err)
			continue
		}
		if !strings.Contains(err.Error(), "Secret argocd/hostile") || !utf8.ValidString(err.Error()) || strings.ContainsAny(err.Error(), "\n\x00\x1b\u202e") {
			t.Errorf("Add(%q): error %q should name the source and carry no raw bytes", name, err)
		}
		if err := srv.Update(nc); !errors.Is(err, config.ErrInvalidName) {
			t.Errorf("Update(%q) = %v, want ErrInvalidName", name, err)
		}
	}
	if got := srv.ClusterNames(); len(got) != 1 || got[0] != "good" {
		t.Fatalf("ClusterNames = %q, want [good]", got)
	}
	waitPhase(t, srv, "good", server.PhaseReady)
}

// TestWatcherHostileNames: a watcher (built-in or the user's own) that
// sends a hostile name gets its event refused in WatchErrors, naming the
// source; the watcher's other clusters join as usual.
func TestWatcherHostileNames(t *testing.T) {
	srv, _ := fakeServer(t, nil, configMapController("cms"))
	m := fakeMember(t)
	w := newChanWatcher()
	srv.Watch(w)
	for i, name := range hostileNames {
		nc := config.NewNamedConfig(name, m.Config())
		nc.Source = config.Source{Object: "Secret argocd/hostile-" + string(rune('a'+i))}
		w.events <- configwatcher.Event{Type: configwatcher.Added, Config: nc}
	}
	ok := config.NewNamedConfig("fine", m.Config())
	w.events <- configwatcher.Event{Type: configwatcher.Added, Config: ok}
	waitPhase(t, srv, "fine", server.PhaseReady)
	test.Eventually(t, 10*time.Second, "every hostile name refused, naming its Secret", func() bool {
		n := 0
		for _, we := range srv.WatchErrors() {
			if errors.Is(we.Err, config.ErrInvalidName) && strings.Contains(we.Err.Error(), "Secret argocd/hostile-") {
				n++
			}
		}
		return n == len(hostileNames)
	})
	if got := srv.ClusterNames(); len(got) != 1 || got[0] != "fine" {
		t.Fatalf("ClusterNames = %q, want [fine]", got)
	}
}

// TestWatcherEventPanicIsContained: an event whose config makes the Server
// panic (here: a rest.Config whose proxy function panics) fails that event
// only, reported with the cluster and its source; the watcher's next events
// are applied and the process lives.
func TestWatcherEventPanicIsContained(t *testing.T) {
	srv, _ := fakeServer(t, nil, configMapController("cms"))
	m := fakeMember(t)
	w := newChanWatcher()
	srv.Watch(w)
	bad := m.Config()
	bad.Proxy = func(*http.Request) (*url.URL, error) { panic("hostile proxy") }
	nc := config.NewNamedConfig("poison", bad)
	nc.Source = config.Source{Object: "Secret argocd/poison"}
	w.events <- configwatcher.Event{Type: configwatcher.Added, Config: nc}
	w.events <- configwatcher.Event{Type: configwatcher.Added, Config: config.NewNamedConfig("after", m.Config())}
	waitPhase(t, srv, "after", server.PhaseReady)
	test.Eventually(t, 10*time.Second, "the panic reported, naming the Secret", func() bool {
		for _, we := range srv.WatchErrors() {
			if errors.Is(we.Err, configwatcher.ErrPanic) && strings.Contains(we.Err.Error(), "Secret argocd/poison") {
				return true
			}
		}
		return false
	})
}
