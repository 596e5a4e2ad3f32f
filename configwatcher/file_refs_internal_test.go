package configwatcher

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The directories watched for referenced files follow the kubeconfigs: a
// reference dropped is a directory no longer watched, so that watches do
// not pile up as kubeconfigs change.
func TestFileWatcherDropsWatchOfDroppedReference(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	write := func(path, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := func(user string) string {
		return `clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}
users:
- name: u
  user: ` + user + `
contexts:
- name: east
  context: {cluster: c, user: u}
`
	}
	write(filepath.Join(dir, "creds", "token"), "one")
	write(filepath.Join(dir, "config"), kubeconfig("{tokenFile: creds/token}"))
	w, err := NewFileWatcher(dir, WithDebounce(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	go func() {
		for range w.Events() {
		}
	}()

	creds := filepath.Join(dir, "creds")
	// WatchList is safe to call while the watcher runs.
	waitFor := func(what string, cond func([]string) bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !cond(w.fsw.WatchList()) {
			if time.Now().After(deadline) {
				t.Fatalf("%s; watching %v", what, w.fsw.WatchList())
			}
			time.Sleep(10 * time.Millisecond) // polling, not an assertion
		}
	}
	waitFor("the token's directory is not watched", func(l []string) bool { return slices.Contains(l, creds) })

	write(filepath.Join(dir, "config"), kubeconfig("{token: inline}"))
	waitFor("the dropped token's directory is still watched", func(l []string) bool { return !slices.Contains(l, creds) })
}

// Entries that are symlinks into sub-directories of the watched directory
// (allowed: they stay inside it) each lead into a directory of their own:
// a thousand of them must not take a thousand inotify watches. The bound
// is reported once, naming the first entry left out, and every cluster is
// served.
func TestFileWatcherSymlinkedEntriesBounded(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	for i := range n {
		sub := filepath.Join(dir, fmt.Sprintf("sub%04d", i))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		kc := fmt.Sprintf("clusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:1\", insecure-skip-tls-verify: true}\ncontexts:\n- name: c%04d\n  context: {cluster: c}\n", i)
		if err := os.WriteFile(filepath.Join(sub, "config"), []byte(kc), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(fmt.Sprintf("sub%04d", i), "config"), filepath.Join(dir, fmt.Sprintf("k%04d", i))); err != nil {
			t.Fatal(err)
		}
	}
	w, err := NewFileWatcher(dir, WithDebounce(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	deadline := time.After(30 * time.Second)
	for got := 0; got < n; {
		select {
		case <-w.Events():
			got++
		case <-deadline:
			t.Fatalf("%d of %d clusters added", got, n)
		}
	}
	first := fmt.Sprintf("k%04d", 256)
	var bound error
	for bound == nil {
		select {
		case err := <-w.Errors():
			if strings.Contains(err.Error(), "symlinks into more than 256 directories") {
				bound = err
			} else {
				t.Logf("other error: %v", err)
			}
		case <-deadline:
			t.Fatal("no error saying that the symlinked entries' directories are not all watched")
		}
	}
	if !strings.Contains(bound.Error(), filepath.Join(dir, first)) {
		t.Errorf("error %q does not name the first entry left out, %s", bound, first)
	}
	// Beyond the bound: the directory, its parent and the links on the way
	// to the temporary directory.
	if l := w.fsw.WatchList(); len(l) > 256+10 {
		t.Errorf("%d symlinked entries take %d watches, more than the bound of 256", n, len(l))
	}
	// Touching an entry reads everything again; the bound is not reported
	// a second time.
	if err := os.Chtimes(filepath.Join(dir, "sub0000", "config"), time.Now(), time.Now()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w.Errors():
		t.Errorf("reported again: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
}
