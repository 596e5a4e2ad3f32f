package configwatcher

import (
	"os"
	"path/filepath"
	"slices"
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
