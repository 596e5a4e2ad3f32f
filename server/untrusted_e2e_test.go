package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// poisoned is a config from outside whose use panics (as
// TestWatcherEventPanicIsContained's): what the Server does with it must
// stay with the watcher that sent it.
func poisoned(name, source string, cfg *rest.Config) *config.NamedConfig {
	cfg.Proxy = func(*http.Request) (*url.URL, error) { panic("hostile proxy") }
	nc := config.NewNamedConfig(name, cfg)
	nc.Source = config.Source{Object: source}
	return nc
}

// deleteWithoutPanic is srv.Delete, failing the test if it panics.
func deleteWithoutPanic(t *testing.T, srv *server.Server, name string) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Delete(%q) panicked on a waiting watcher's config: %v", name, r)
		}
	}()
	return srv.Delete(name)
}

// watchErrorCount counts srv's watch errors wrapping target that name
// every one of parts.
func watchErrorCount(srv *server.Server, target error, parts ...string) int {
	n := 0
	for _, we := range srv.WatchErrors() {
		msg := we.Err.Error()
		if errors.Is(we.Err, target) && containsAll(msg, parts) {
			n++
		}
	}
	return n
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// TestHandOverOfPoisonedConfig: a watcher's config that waits for a name
// another source holds is outside data the Server never used. When the
// name is let go — by Server.Delete of a name added by hand, or by the
// owning watcher's Deleted — and the waiting config panics (or fails) as
// it is applied, the panic reaches no caller: Delete returns as usual,
// the panic is a watch error naming the waiting config's source, the next
// config in line takes over if there is one, and otherwise the name is
// free: no cluster runs under it (not the old owner's config either), and
// Server.Add may take it again.
func TestHandOverOfPoisonedConfig(t *testing.T) {
	srv, _ := fakeServer(t, nil, configMapController("cms"))
	m := fakeMember(t)
	w1, w2 := newChanWatcher(), newChanWatcher()
	srv.Watch(w1)
	srv.Watch(w2)
	withAgent := func(name, source, agent string) *config.NamedConfig {
		cfg := m.Config()
		cfg.UserAgent = agent
		nc := config.NewNamedConfig(name, cfg)
		nc.Source = config.Source{Object: source}
		return nc
	}
	gone := func(name string) func() bool {
		return func() bool {
			_, err := srv.Status(name)
			return errors.Is(err, server.ErrClusterNotFound)
		}
	}

	t.Run("DeleteByHandNextInLineTakesOver", func(t *testing.T) {
		if err := srv.Add(withAgent("ho-a", "", "hand")); err != nil {
			t.Fatal(err)
		}
		waitPhase(t, srv, "ho-a", server.PhaseReady)
		// The poisoned claim is first in line: the two watchers' events are
		// applied by goroutines of their own, so wait for each in turn.
		w1.events <- configwatcher.Event{Type: configwatcher.Added, Config: poisoned("ho-a", "Secret t/poison-a", m.Config())}
		test.Eventually(t, 10*time.Second, "the poisoned claim refused", func() bool {
			return watchErrorCount(srv, server.ErrClusterNameTaken, "poison-a") == 1
		})
		w2.events <- configwatcher.Event{Type: configwatcher.Added, Config: withAgent("ho-a", "Secret t/good-a", "w2")}
		test.Eventually(t, 10*time.Second, "the good claim refused", func() bool {
			return watchErrorCount(srv, server.ErrClusterNameTaken, "good-a") == 1
		})
		if err := deleteWithoutPanic(t, srv, "ho-a"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		test.Eventually(t, 10*time.Second, "the panic reported, naming the poisoned Secret", func() bool {
			return watchErrorCount(srv, configwatcher.ErrPanic, "Secret t/poison-a") == 1
		})
		test.Eventually(t, 10*time.Second, "the good waiting config takes over", func() bool {
			st, err := srv.Status("ho-a")
			return err == nil && st.Source.Object == "Secret t/good-a" && st.Phase == server.PhaseReady
		})
		if mgr, err := srv.GetManager("ho-a"); err != nil || mgr.GetConfig().UserAgent != "w2" {
			t.Fatalf("ho-a runs another config than the one that took over (error %v)", err)
		}
	})

	t.Run("DeleteByHandNameStaysFree", func(t *testing.T) {
		if err := srv.Add(withAgent("ho-b", "", "hand")); err != nil {
			t.Fatal(err)
		}
		w1.events <- configwatcher.Event{Type: configwatcher.Added, Config: poisoned("ho-b", "Secret t/poison-b", m.Config())}
		test.Eventually(t, 10*time.Second, "the watcher's claim refused", func() bool {
			return watchErrorCount(srv, server.ErrClusterNameTaken, "poison-b") == 1
		})
		if err := deleteWithoutPanic(t, srv, "ho-b"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		test.Eventually(t, 10*time.Second, "the panic reported", func() bool {
			return watchErrorCount(srv, configwatcher.ErrPanic, "Secret t/poison-b") == 1
		})
		if !gone("ho-b")() {
			t.Fatal("a cluster still runs under the deleted name")
		}
		// The poisoned config never ran: the name is nobody's.
		if err := srv.Add(withAgent("ho-b", "", "hand-again")); err != nil {
			t.Fatalf("Add of the freed name: %v", err)
		}
		waitPhase(t, srv, "ho-b", server.PhaseReady)
	})

	t.Run("OwnerDeletesNameStaysFree", func(t *testing.T) {
		w2.events <- configwatcher.Event{Type: configwatcher.Added, Config: withAgent("ho-c", "Secret t/owner-c", "owner")}
		waitPhase(t, srv, "ho-c", server.PhaseReady)
		w1.events <- configwatcher.Event{Type: configwatcher.Added, Config: poisoned("ho-c", "Secret t/poison-c", m.Config())}
		test.Eventually(t, 10*time.Second, "the second watcher's claim refused", func() bool {
			return watchErrorCount(srv, server.ErrClusterNameTaken, "poison-c") == 1
		})
		w2.events <- configwatcher.Event{Type: configwatcher.Deleted, Config: &config.NamedConfig{Name: "ho-c"}}
		test.Eventually(t, 10*time.Second, "the panic reported", func() bool {
			return watchErrorCount(srv, configwatcher.ErrPanic, "Secret t/poison-c") == 1
		})
		// The owner deleted its cluster: its config must not go on
		// running under a name nobody feeds.
		test.Eventually(t, 10*time.Second, "ho-c gone", gone("ho-c"))
		if err := srv.Add(withAgent("ho-c", "", "hand")); err != nil {
			t.Fatalf("Add of the freed name: %v", err)
		}
		waitPhase(t, srv, "ho-c", server.PhaseReady)
	})
}

// TestHandAndWatcherRaceForNames: for each of many names, Server.Add and
// a watcher's Added race from their own goroutines. Whatever the order,
// each name ends with exactly one owner: Add succeeded and the watcher's
// claim was refused, or Add was refused with ErrClusterNameTaken; Status
// names that owner, and the Manager runs that owner's config, started
// once. Then the owners let go one by one, and the other source's config
// takes over each name (hand-added ones), or the name goes (the
// watcher's).
func TestHandAndWatcherRaceForNames(t *testing.T) {
	srv, _ := fakeServer(t, nil)
	m := fakeMember(t)
	w := newChanWatcher()
	srv.Watch(w)
	const n = 40
	nameOf := func(i int) string { return fmt.Sprintf("race-%02d", i) }
	source := func(i int) string { return "Secret race/" + nameOf(i) }
	cfgFor := func(i int, agent string) *config.NamedConfig {
		cfg := m.Config()
		cfg.UserAgent = agent
		return config.NewNamedConfig(nameOf(i), cfg)
	}
	// The watcher sends the names in order; once it is half way, four
	// goroutines add them by hand in the reverse order: they meet
	// somewhere in the second half, and race there.
	const adders = 4
	addErrs := make([]error, n)
	half := make(chan struct{})
	var wg sync.WaitGroup
	for g := range adders {
		wg.Go(func() {
			<-half
			for i := n - 1 - g; i >= 0; i -= adders {
				addErrs[i] = srv.Add(cfgFor(i, "hand"))
			}
		})
	}
	wg.Go(func() {
		for i := range n {
			if i == n/2 {
				close(half)
			}
			nc := cfgFor(i, "watcher")
			nc.Source = config.Source{Object: source(i)}
			w.events <- configwatcher.Event{Type: configwatcher.Added, Config: nc}
		}
	})
	wg.Wait()

	handWon := handWinners(t, addErrs, nameOf, source)
	t.Logf("%d names went to Server.Add, %d to the watcher", len(handWon), n-len(handWon))
	owner := func(i int) (src, agent string) {
		if handWon[i] {
			return "", "hand"
		}
		return source(i), "watcher"
	}
	check := func(i int) {
		t.Helper()
		src, agent := owner(i)
		test.Eventually(t, 30*time.Second, nameOf(i)+" Ready", func() bool {
			st, err := srv.Status(nameOf(i))
			return err == nil && st.Phase == server.PhaseReady
		})
		st, _ := srv.Status(nameOf(i))
		mgr, err := srv.GetManager(nameOf(i))
		if err != nil {
			t.Fatal(err)
		}
		if st.Source.Object != src || mgr.GetConfig().UserAgent != agent || st.Restarts != 0 {
			t.Errorf("%s: source %q, config of %q, %d restarts; want source %q and its config (%s), started once",
				nameOf(i), st.Source.Object, mgr.GetConfig().UserAgent, st.Restarts, src, agent)
		}
	}
	for i := range n {
		check(i)
	}
	// The watcher's refused claims wait; WatchErrors keeps the latest 32.
	test.Eventually(t, 10*time.Second, "the watcher's refused claims reported", func() bool {
		return watchErrorCount(srv, server.ErrClusterNameTaken, "Server.Add") >= min(len(handWon), 32)
	})

	// Each owner lets go.
	for i := range n {
		if handWon[i] {
			if err := srv.Delete(nameOf(i)); err != nil {
				t.Fatal(err)
			}
			handWon[i] = false
			check(i) // the waiting watcher's config took over
			continue
		}
		if err := srv.Delete(nameOf(i)); !errors.Is(err, server.ErrClusterNameTaken) {
			t.Fatalf("Delete of the watcher's %s = %v, want ErrClusterNameTaken", nameOf(i), err)
		}
	}
	for i := range n {
		w.events <- configwatcher.Event{Type: configwatcher.Deleted, Config: &config.NamedConfig{Name: nameOf(i)}}
	}
	test.Eventually(t, 30*time.Second, "every name gone", func() bool { return len(srv.ClusterNames()) == 0 })
	for i := range n {
		if err := srv.Add(cfgFor(i, "hand")); err != nil {
			t.Fatalf("Add(%s) once nobody feeds it: %v", nameOf(i), err)
		}
	}
}

// TestSecretWatcherAgainstHandAddedNames: on real API servers, a
// SecretWatcher and Server.Add race for the same names, each Secret a real
// kubeconfig Secret reaching m2 while Server.Add's config reaches m1. Each
// name ends with one owner, whose API server its Manager talks to, started
// once; the loser is refused with ErrClusterNameTaken naming both sources
// (Add's error, or the watch error naming the Secret). Add, Update and
// Delete of a name the Secret holds are refused; deleting a hand-added
// name hands it to its Secret, and deleting the Secret of a name the
// watcher holds removes the cluster.
func TestSecretWatcherAgainstHandAddedNames(t *testing.T) {
	ns := testNamespace(t)
	r := startServer(t, ns, nil)
	host := adminClient(t, "host")
	w, err := configwatcher.NewSecretWatcher(fleet.Cluster("host").Config, configwatcher.WithSecretNamespace(ns),
		configwatcher.WithLogger(test.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	r.srv.Watch(w)
	m1, m2 := fleet.Cluster("m1").Config, fleet.Cluster("m2").Config
	kubeconfig, err := clientcmd.Write(test.KubeconfigFor("m2", m2))
	if err != nil {
		t.Fatal(err)
	}

	const n = 12
	nameOf := func(i int) string { return fmt.Sprintf("secret-race-%02d", i) }
	source := func(i int) string { return "Secret " + ns + "/" + nameOf(i) }
	createSecret := func(i int) {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: nameOf(i), Labels: map[string]string{
				configwatcher.DefaultSecretLabel: configwatcher.DefaultSecretLabelValue,
			}},
			Data: map[string][]byte{"kubeconfig": kubeconfig},
		}
		if err := host.Create(context.Background(), s); err != nil {
			t.Error(err)
		}
	}
	// The first Secret is served before the race, so that the watcher is
	// under way; then the other Secrets are created in order and, from
	// half way, two goroutines add the names by hand in the reverse order.
	createSecret(0)
	waitReady(t, r.srv, nameOf(0))
	addErrs := make([]error, n)
	half := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			<-half
			for i := n - 1 - g; i >= 0; i -= 2 {
				addErrs[i] = r.srv.Add(config.NewNamedConfig(nameOf(i), rest.CopyConfig(m1)))
			}
		})
	}
	wg.Go(func() {
		for i := 1; i < n; i++ {
			if i == n/2 {
				close(half)
			}
			createSecret(i)
		}
	})
	wg.Wait()

	handWon := handWinners(t, addErrs, nameOf, source)
	t.Logf("%d names went to Server.Add, %d to the Secrets", len(handWon), n-len(handWon))
	check := func(i int) {
		t.Helper()
		src, apiServer := source(i), m2.Host
		if handWon[i] {
			src, apiServer = "", m1.Host
			test.Eventually(t, 30*time.Second, "the Secret's claim on "+nameOf(i)+" refused, naming both", func() bool {
				return watchErrorCount(r.srv, server.ErrClusterNameTaken, `"`+nameOf(i)+`"`, source(i), "Server.Add") > 0
			})
		}
		waitReady(t, r.srv, nameOf(i))
		st, err := r.srv.Status(nameOf(i))
		if err != nil {
			t.Fatal(err)
		}
		mgr, err := r.srv.GetManager(nameOf(i))
		if err != nil {
			t.Fatal(err)
		}
		if st.Source.Object != src || mgr.GetConfig().Host != apiServer || st.Restarts != 0 {
			t.Errorf("%s: source %q, Manager on %s, %d restarts; want source %q, on %s, started once",
				nameOf(i), st.Source.Object, mgr.GetConfig().Host, st.Restarts, src, apiServer)
		}
	}
	for i := range n {
		check(i)
	}

	for i := range n {
		if handWon[i] {
			if err := r.srv.Delete(nameOf(i)); err != nil {
				t.Fatal(err)
			}
			handWon[i] = false
			check(i) // the Secret's config took over
			continue
		}
		for call, err := range map[string]error{
			"Add":    r.srv.Add(config.NewNamedConfig(nameOf(i), rest.CopyConfig(m1))),
			"Update": r.srv.Update(config.NewNamedConfig(nameOf(i), rest.CopyConfig(m1))),
			"Delete": r.srv.Delete(nameOf(i)),
		} {
			if !errors.Is(err, server.ErrClusterNameTaken) || !strings.Contains(err.Error(), source(i)) {
				t.Errorf("%s of %s, which its Secret feeds: %v, want ErrClusterNameTaken naming the Secret", call, nameOf(i), err)
			}
		}
		check(i)
	}
	for i := range n {
		if err := host.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: nameOf(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	test.Eventually(t, 30*time.Second, "every name gone with its Secret", func() bool { return len(r.srv.ClusterNames()) == 0 })
}

// handWinners reads the errors of a race of Server.Add against a watcher,
// name by name: the names Add won, and for each one it lost an
// ErrClusterNameTaken naming the watcher's source, nothing else.
func handWinners(t *testing.T, addErrs []error, nameOf, source func(int) string) map[int]bool {
	t.Helper()
	won := map[int]bool{}
	for i, err := range addErrs {
		switch {
		case err == nil:
			won[i] = true
		case errors.Is(err, server.ErrClusterNameTaken) && strings.Contains(err.Error(), source(i)):
		default:
			t.Fatalf("Add(%s) = %v, want nil or ErrClusterNameTaken naming %s", nameOf(i), err, source(i))
		}
	}
	return won
}
