package e2e

import (
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// watchedDir is a directory of kubeconfigs that a fault Server watches,
// with members a and b Ready from it, each with n ConfigMaps in ns, and a
// second watcher on the same directory (the observer) that records every
// event and error: the Server keeps only the latest few errors.
type watchedDir struct {
	dir    string
	r      *faultServer
	before map[string]server.ClusterStatus // a's and b's status once Ready

	obs       configwatcher.ConfigWatcher
	collected chan struct{}
	mu        sync.Mutex
	events    []string // "Added c", …
	errors    []string
}

func newWatchedDir(t *testing.T, ns string, n int) *watchedDir {
	t.Helper()
	d := &watchedDir{dir: t.TempDir(), before: map[string]server.ClusterStatus{}, collected: make(chan struct{})}
	for _, m := range []string{"a", "b"} {
		configMaps(t, m, ns, n)
		if err := test.WriteKubeconfig(filepath.Join(d.dir, m+".kubeconfig"), m, fleet.Cluster(m).Config); err != nil {
			t.Fatal(err)
		}
	}
	d.r = startFaultServer(t, ns, logr.Discard(), false)
	feed, err := configwatcher.NewFileWatcher(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	d.r.srv.Watch(feed)
	for _, m := range []string{"a", "b"} {
		d.before[m] = waitPhase(t, d.r.srv, m, server.PhaseReady, 60*time.Second)
	}
	if d.obs, err = configwatcher.NewFileWatcher(d.dir); err != nil {
		t.Fatal(err)
	}
	go d.collect()
	return d
}

func (d *watchedDir) collect() {
	defer close(d.collected)
	events, errs := d.obs.Events(), d.obs.Errors()
	for events != nil || errs != nil {
		select {
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			d.mu.Lock()
			d.events = append(d.events, ev.Type.String()+" "+ev.Config.Name)
			d.mu.Unlock()
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			d.mu.Lock()
			d.errors = append(d.errors, err.Error())
			d.mu.Unlock()
		}
	}
}

// unreported returns the base names of paths that no error reported so far
// names, as named reports it (the path as it is, or quoted).
func (d *watchedDir) unreported(paths []string, named func(msg, path string) bool) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var missing []string
	for _, p := range paths {
		if !slices.ContainsFunc(d.errors, func(e string) bool { return named(e, p) }) {
			missing = append(missing, filepath.Base(p))
		}
	}
	return missing
}

func (d *watchedDir) sawEvent(ev string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Contains(d.events, ev)
}

// stop stops the observer and returns what it saw.
func (d *watchedDir) stop() (events, errors []string) {
	d.obs.Stop()
	<-d.collected
	return d.events, d.errors
}

// checkUndisturbed fails the test unless the Server's clusters are names
// and a and b are Ready with the status they had before.
func (d *watchedDir) checkUndisturbed(t *testing.T, what string, names ...string) {
	t.Helper()
	if got := d.r.srv.ClusterNames(); !slices.Equal(got, names) {
		t.Errorf("clusters after the %s: %v, want %v", what, got, names)
	}
	for _, m := range []string{"a", "b"} {
		st, _ := d.r.srv.Status(m)
		if st.Phase != server.PhaseReady || st.Restarts != d.before[m].Restarts || !st.Since.Equal(d.before[m].Since) {
			t.Errorf("%s was disturbed by the %s: before %+v, after %+v", m, what, d.before[m], st)
		}
	}
}

// contains reports whether msg names path as it is.
func contains(msg, path string) bool { return strings.Contains(msg, path) }
