package configwatcher_test

import (
	"errors"
	"fmt"
	"io/fs"
	mathrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/internal/testcert"
)

const (
	debounce = 50 * time.Millisecond
	// quiet is how long "nothing more happens" is checked for after the
	// expected events: a few debounce periods, so that a stray follow-up
	// read would have reported by then.
	quiet = 5 * debounce
	// patience bounds every wait for something that should happen.
	patience = 15 * time.Second
)

type ctxSpec struct{ Name, Server, Token string }

func kubeconfig(t testing.TB, specs ...ctxSpec) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	for _, s := range specs {
		cfg.Clusters[s.Name] = &clientcmdapi.Cluster{Server: s.Server, InsecureSkipTLSVerify: true}
		cfg.AuthInfos[s.Name] = &clientcmdapi.AuthInfo{Token: s.Token}
		cfg.Contexts[s.Name] = &clientcmdapi.Context{Cluster: s.Name, AuthInfo: s.Name}
	}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func server(port int) string { return fmt.Sprintf("https://127.0.0.1:%d", port) }

func mkdir(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	mkdir(t, filepath.Dir(path))
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// writeLikeAnEditor writes a hidden temporary file next to path and renames
// it over path, as most editors and config tools do.
func writeLikeAnEditor(t testing.TB, path string, data []byte) {
	t.Helper()
	f, err := os.CreateTemp(filepath.Dir(path), ".edit-*")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		t.Fatal(err)
	}
}

func start(t *testing.T, path string, opts ...configwatcher.FileOption) *configwatcher.FileWatcher {
	t.Helper()
	w, err := configwatcher.NewFileWatcher(path, append([]configwatcher.FileOption{configwatcher.WithDebounce(debounce)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

func describe(ev configwatcher.Event) string {
	s := ev.Type.String() + " " + ev.Config.Name
	if ev.Type != configwatcher.Deleted && ev.Config.Config != nil {
		s += " " + ev.Config.Config.Host
	}
	return s
}

// expectEvents waits for exactly the described events (in any order), then
// checks that nothing more arrives for a while.
func expectEvents(t *testing.T, w *configwatcher.FileWatcher, want ...string) []configwatcher.Event {
	t.Helper()
	var got []configwatcher.Event
	var seen []string
	deadline := time.After(patience)
	for len(got) < len(want) {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("Events closed; got %v, want %v", seen, want)
			}
			got = append(got, ev)
			seen = append(seen, describe(ev))
		case <-deadline:
			t.Fatalf("timed out; got %v, want %v", seen, want)
		}
	}
	expectQuiet(t, w)
	slices.Sort(seen)
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(seen, want) {
		t.Fatalf("events = %v, want %v", seen, want)
	}
	return got
}

func expectQuiet(t *testing.T, w *configwatcher.FileWatcher) {
	t.Helper()
	select {
	case ev := <-w.Events():
		t.Fatalf("unexpected event %s", describe(ev))
	case <-time.After(quiet):
	}
}

// expectError is awaitError for a test that needs only that the error came.
func expectError(t *testing.T, w *configwatcher.FileWatcher, parts ...string) {
	t.Helper()
	_ = awaitError(t, w, parts...) // its text was checked already
}

// awaitError waits for an error mentioning every one of parts, skipping
// others, and returns it.
func awaitError(t *testing.T, w *configwatcher.FileWatcher, parts ...string) error {
	t.Helper()
	deadline := time.After(patience)
	for {
		select {
		case err := <-w.Errors():
			if containsAll(err.Error(), parts) {
				return err
			}
			t.Logf("other error: %v", err)
		case <-deadline:
			t.Fatalf("no error mentioning %q", parts)
		}
	}
}

func expectNoError(t *testing.T, w *configwatcher.FileWatcher) {
	t.Helper()
	select {
	case err := <-w.Errors():
		t.Fatalf("unexpected error: %v", err)
	default:
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func TestFileWatcherMissingPath(t *testing.T) {
	leakcheck.Cleanup(t)
	missing := filepath.Join(t.TempDir(), "nope")
	_, err := configwatcher.NewFileWatcher(missing)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("err = %v, want a not-exist error naming %s", err, missing)
	}
}

func TestFileWatcherInitialStateAndFileChanges(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	writeFile(t, a, kubeconfig(t, ctxSpec{"a1", server(1), "t"}, ctxSpec{"a2", server(2), "t"}))
	writeFile(t, b, kubeconfig(t, ctxSpec{"b1", server(3), "t"}))

	w := start(t, dir)
	evs := expectEvents(t, w, "Added a1 "+server(1), "Added a2 "+server(2), "Added b1 "+server(3))
	if evs[0].Config.Source != (config.Source{File: a, Context: "a1"}) {
		t.Errorf("source = %+v", evs[0].Config.Source)
	}

	t.Run("same content again is no event", func(t *testing.T) {
		writeLikeAnEditor(t, a, kubeconfig(t, ctxSpec{"a1", server(1), "t"}, ctxSpec{"a2", server(2), "t"}))
		expectQuiet(t, w)
	})
	t.Run("editor rename write is one Updated", func(t *testing.T) {
		writeLikeAnEditor(t, a, kubeconfig(t, ctxSpec{"a1", server(1), "t"}, ctxSpec{"a2", server(20), "t"}))
		expectEvents(t, w, "Updated a2 "+server(20))
	})
	t.Run("rotated token is one Updated", func(t *testing.T) {
		writeLikeAnEditor(t, a, kubeconfig(t, ctxSpec{"a1", server(1), "rotated"}, ctxSpec{"a2", server(20), "t"}))
		expectEvents(t, w, "Updated a1 "+server(1))
	})
	t.Run("context removed from a file is one Deleted", func(t *testing.T) {
		writeLikeAnEditor(t, a, kubeconfig(t, ctxSpec{"a1", server(1), "rotated"}))
		expectEvents(t, w, "Deleted a2")
	})
	t.Run("context added to a file is one Added", func(t *testing.T) {
		writeLikeAnEditor(t, b, kubeconfig(t, ctxSpec{"b1", server(3), "t"}, ctxSpec{"b2", server(4), "t"}))
		expectEvents(t, w, "Added b2 "+server(4))
	})
	t.Run("file renamed within the directory is one Updated per context, naming the new file", func(t *testing.T) {
		c := filepath.Join(dir, "c.yaml")
		if err := os.Rename(b, c); err != nil {
			t.Fatal(err)
		}
		// Reached the same way: only the source differs (a Server keeps
		// the members running and shows the new file in their Status).
		for _, ev := range expectEvents(t, w, "Updated b1 "+server(3), "Updated b2 "+server(4)) {
			if ev.Config.Source.File != c {
				t.Errorf("%s: source = %s, want %s", ev.Config.Name, ev.Config.Source.File, c)
			}
		}
		writeLikeAnEditor(t, c, kubeconfig(t, ctxSpec{"b1", server(30), "t"}, ctxSpec{"b2", server(4), "t"}))
		evs := expectEvents(t, w, "Updated b1 "+server(30))
		if evs[0].Config.Source.File != c {
			t.Errorf("source = %s, want %s", evs[0].Config.Source.File, c)
		}
		if err := os.Rename(c, b); err != nil {
			t.Fatal(err)
		}
		expectEvents(t, w, "Updated b1 "+server(30), "Updated b2 "+server(4))
	})
	t.Run("file moved out is Deleted per context", func(t *testing.T) {
		if err := os.Rename(b, filepath.Join(t.TempDir(), "b.yaml")); err != nil {
			t.Fatal(err)
		}
		expectEvents(t, w, "Deleted b1", "Deleted b2")
	})
	t.Run("file deleted is Deleted per context", func(t *testing.T) {
		if err := os.Remove(a); err != nil {
			t.Fatal(err)
		}
		expectEvents(t, w, "Deleted a1")
	})
	expectNoError(t, w)
}

func TestFileWatcherBurstOfWritesIsOneEvent(t *testing.T) {
	leakcheck.Cleanup(t)
	path := filepath.Join(t.TempDir(), "config")
	writeFile(t, path, kubeconfig(t, ctxSpec{"x", server(1), "t"}))
	// Writes less than a debounce apart are one event. The debounce is
	// longer than the default so that a loaded machine, which may stall
	// the writing goroutine for a good part of the default, keeps them
	// less than one apart.
	w := start(t, path, configwatcher.WithDebounce(time.Second))
	expectEvents(t, w, "Added x "+server(1))

	// In-place writes, as `cp` or a shell redirection make them.
	versions := make([][]byte, 10)
	for i := range versions {
		versions[i] = kubeconfig(t, ctxSpec{"x", server(100 + i), "t"})
	}
	for _, v := range versions {
		writeFile(t, path, v)
	}
	expectEvents(t, w, "Updated x "+server(109))
}

func TestFileWatcherSingleFile(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	writeFile(t, path, kubeconfig(t, ctxSpec{"x", server(1), "t"}))
	// Neighbours of a watched file are none of its business.
	writeFile(t, filepath.Join(dir, "neighbour"), kubeconfig(t, ctxSpec{"n", server(9), "t"}))

	w := start(t, path)
	expectEvents(t, w, "Added x "+server(1))

	writeLikeAnEditor(t, path, kubeconfig(t, ctxSpec{"x", server(2), "t"}))
	expectEvents(t, w, "Updated x "+server(2))
	writeLikeAnEditor(t, path, kubeconfig(t, ctxSpec{"x", server(3), "t"}))
	expectEvents(t, w, "Updated x "+server(3))

	writeFile(t, filepath.Join(dir, "neighbour"), []byte("broken"))
	expectQuiet(t, w)

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, w, "Deleted x")
	expectError(t, w, path, "does not exist")

	writeLikeAnEditor(t, path, kubeconfig(t, ctxSpec{"x", server(4), "t"}))
	expectEvents(t, w, "Added x "+server(4))
	expectNoError(t, w)
}

func TestFileWatcherFileSymlinkedElsewhere(t *testing.T) {
	leakcheck.Cleanup(t)
	target := filepath.Join(t.TempDir(), "real")
	writeFile(t, target, kubeconfig(t, ctxSpec{"x", server(1), "t"}))
	link := filepath.Join(t.TempDir(), "config")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	w := start(t, link)
	expectEvents(t, w, "Added x "+server(1))

	writeFile(t, target, kubeconfig(t, ctxSpec{"x", server(2), "t"}))
	expectEvents(t, w, "Updated x "+server(2))
}

// secretVolume mimics how the kubelet maintains a Secret or ConfigMap
// volume: files in a timestamped hidden directory, "..data" pointing at it,
// and a top-level symlink per key through "..data".
type secretVolume struct {
	dir     string
	current string
	n       int
	keys    []string
}

func newSecretVolume(t *testing.T, dir string, files map[string][]byte) *secretVolume {
	s := &secretVolume{dir: dir}
	mkdir(t, dir)
	s.update(t, files)
	return s
}

// update publishes files the kubelet's way: write a new timestamped
// directory, point "..data_tmp" at it, rename that over "..data", fix the
// top-level links, remove the old directory.
func (s *secretVolume) update(t *testing.T, files map[string][]byte) {
	t.Helper()
	s.n++
	ts := fmt.Sprintf("..2026_11_21_10_00_%02d.%09d", s.n, s.n)
	for name, data := range files {
		writeFile(t, filepath.Join(s.dir, ts, name), data)
	}
	tmp := filepath.Join(s.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(files))
	for name := range files {
		keys = append(keys, name)
		if !slices.Contains(s.keys, name) {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(s.dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, old := range s.keys {
		if _, ok := files[old]; !ok {
			if err := os.Remove(filepath.Join(s.dir, old)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if s.current != "" {
		if err := os.RemoveAll(filepath.Join(s.dir, s.current)); err != nil {
			t.Fatal(err)
		}
	}
	s.current, s.keys = ts, keys
}

func TestFileWatcherSecretVolume(t *testing.T) {
	leakcheck.Cleanup(t)
	caPEM, _ := testcert.SelfSigned(t)
	files := func(bServer int) map[string][]byte {
		cfg := kubeconfig(t, ctxSpec{"a", server(1), "t"}, ctxSpec{"b", server(bServer), "t"})
		// A CA next to the kubeconfig, referenced relatively: it must not be
		// reported as a broken kubeconfig.
		return map[string][]byte{
			"config": []byte(strings.Replace(string(cfg), "insecure-skip-tls-verify: true", "certificate-authority: ca.crt", 1)),
			"ca.crt": caPEM,
		}
	}

	t.Run("directory", func(t *testing.T) {
		vol := newSecretVolume(t, filepath.Join(t.TempDir(), "secret"), files(2))
		w := start(t, vol.dir)
		evs := expectEvents(t, w, "Added a "+server(1), "Added b "+server(2))
		for _, ev := range evs {
			// Read through "..data", inside the volume, by the loader.
			if ev.Config.Name == "a" && (ev.Config.Config.CAFile != "" || string(ev.Config.Config.CAData) != string(caPEM)) {
				t.Errorf("CA not read from the volume: CAFile = %q", ev.Config.Config.CAFile)
			}
		}

		vol.update(t, files(20))
		expectEvents(t, w, "Updated b "+server(20))
		vol.update(t, files(20))
		expectQuiet(t, w)
		vol.update(t, map[string][]byte{"other": kubeconfig(t, ctxSpec{"c", server(5), "t"})})
		expectEvents(t, w, "Deleted a", "Deleted b", "Added c "+server(5))
		expectNoError(t, w)
	})

	t.Run("single file in it", func(t *testing.T) {
		vol := newSecretVolume(t, filepath.Join(t.TempDir(), "secret"), files(2))
		w := start(t, filepath.Join(vol.dir, "config"))
		expectEvents(t, w, "Added a "+server(1), "Added b "+server(2))
		vol.update(t, files(21))
		expectEvents(t, w, "Updated b "+server(21))
		expectNoError(t, w)
	})
}

func TestFileWatcherBrokenFileKeepsLastGoodState(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "fleet.yaml")
	good := kubeconfig(t, ctxSpec{"a", server(1), "t"}, ctxSpec{"b", server(2), "t"})
	writeFile(t, path, good)
	w := start(t, dir)
	expectEvents(t, w, "Added a "+server(1), "Added b "+server(2))

	for _, broken := range [][]byte{
		[]byte("clusters: [oops"),
		good[:len(good)/2], // half-written
		nil,                // truncated by an editor
	} {
		writeFile(t, path, broken)
		expectError(t, w, path)
		expectQuiet(t, w)
	}

	writeFile(t, path, good)
	expectQuiet(t, w)

	t.Run("one broken context keeps its last good config", func(t *testing.T) {
		writeFile(t, path, []byte(strings.Replace(string(kubeconfig(t, ctxSpec{"a", server(10), "t"}, ctxSpec{"b", server(2), "t"})),
			"cluster: b", "cluster: missing", 1)))
		expectEvents(t, w, "Updated a "+server(10))
		err := awaitError(t, w, path, `"b"`, "missing")
		if !errors.Is(err, config.ErrInvalidKubeconfig) {
			t.Errorf("err = %v, want ErrInvalidKubeconfig", err)
		}
	})

	writeFile(t, path, kubeconfig(t, ctxSpec{"a", server(10), "t"}, ctxSpec{"b", server(20), "t"}))
	expectEvents(t, w, "Updated b "+server(20))
}

func TestFileWatcherDuplicateContext(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := t.TempDir()
	first, second := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	writeFile(t, second, kubeconfig(t, ctxSpec{"prod", server(2), "t"}))
	writeFile(t, first, kubeconfig(t, ctxSpec{"prod", server(1), "t"}))

	w := start(t, dir)
	evs := expectEvents(t, w, "Added prod "+server(1))
	if evs[0].Config.Source.File != first {
		t.Errorf("prod from %s, want %s", evs[0].Config.Source.File, first)
	}
	err := awaitError(t, w, first, second, `"prod"`)
	if !errors.Is(err, config.ErrDuplicateContext) {
		t.Errorf("err = %v, want ErrDuplicateContext", err)
	}

	// The conflict ends when the winner goes; the other definition takes
	// over.
	if err := os.Remove(first); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, w, "Updated prod "+server(2))
}

func TestFileWatcherAuthPlugins(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "exec.yaml")
	writeFile(t, path, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/false, interactiveMode: Never}
contexts:
- name: runs-exec
  context: {cluster: c, user: u}
`))

	refused := start(t, dir)
	err := awaitError(t, refused, path, `"runs-exec"`)
	if !errors.Is(err, config.ErrAuthPluginRefused) {
		t.Errorf("err = %v, want ErrAuthPluginRefused", err)
	}
	expectQuiet(t, refused)

	allowed := start(t, dir, configwatcher.AllowAuthPlugins())
	evs := expectEvents(t, allowed, "Added runs-exec https://127.0.0.1:6443")
	if evs[0].Config.Config.ExecProvider == nil {
		t.Error("exec provider missing")
	}
}

func TestFileWatcherDirectoryRemovedAndRecreated(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := filepath.Join(t.TempDir(), "fleet")
	path := filepath.Join(dir, "a.yaml")
	writeFile(t, path, kubeconfig(t, ctxSpec{"a1", server(1), "t"}, ctxSpec{"a2", server(2), "t"}))
	w := start(t, dir)
	expectEvents(t, w, "Added a1 "+server(1), "Added a2 "+server(2))

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, w, "Deleted a1", "Deleted a2")
	expectError(t, w, dir, "does not exist")

	mkdir(t, dir)
	writeLikeAnEditor(t, path, kubeconfig(t, ctxSpec{"a1", server(1), "t"}, ctxSpec{"a2", server(2), "t"}))
	expectEvents(t, w, "Added a1 "+server(1), "Added a2 "+server(2))

	// The new directory is watched.
	writeLikeAnEditor(t, path, kubeconfig(t, ctxSpec{"a1", server(10), "t"}, ctxSpec{"a2", server(2), "t"}))
	expectEvents(t, w, "Updated a1 "+server(10))

	// Replaced faster than the watcher reads: still the new directory is
	// watched afterwards.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, kubeconfig(t, ctxSpec{"a1", server(10), "t"}, ctxSpec{"a2", server(2), "t"}))
	select {
	case ev := <-w.Events():
		// Only if a read fell between removal and re-creation.
		if ev.Type != configwatcher.Deleted {
			t.Fatalf("unexpected %s", describe(ev))
		}
		expectEvents(t, w, "Deleted a2", "Added a1 "+server(10), "Added a2 "+server(2))
	case <-time.After(quiet):
	}
	writeLikeAnEditor(t, path, kubeconfig(t, ctxSpec{"a1", server(10), "t"}, ctxSpec{"a2", server(20), "t"}))
	expectEvents(t, w, "Updated a2 "+server(20))
}

// TestFileWatcherStorm throws a thousand files, most of them garbage, into a
// watched directory. The watcher must survive, name the bad files, pick up
// the good ones, and never drop the clusters it had.
func TestFileWatcherStorm(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "keep.yaml"), kubeconfig(t, ctxSpec{"keep-1", server(1), "t"}, ctxSpec{"keep-2", server(2), "t"}))
	w := start(t, dir)
	expectEvents(t, w, "Added keep-1 "+server(1), "Added keep-2 "+server(2))

	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	wg.Go(func() {
		for err := range w.Errors() {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	})

	rng := mathrand.New(mathrand.NewPCG(1, 2))
	var want []string
	for i := range 1000 {
		// "s-" sorts after "keep.yaml": a duplicate never wins.
		path := filepath.Join(dir, fmt.Sprintf("s-%04d", i))
		var data []byte
		switch i % 5 {
		case 0:
			data = make([]byte, rng.IntN(2048))
			for j := range data {
				data[j] = byte(rng.UintN(256) & 0xff)
			}
		case 1:
			// Cut before the contexts end: a cut inside them can leave a
			// valid context (one without a user, say).
			full := kubeconfig(t, ctxSpec{fmt.Sprintf("trunc-%d", i), server(i), "t"})
			data = full[:rng.IntN(strings.Index(string(full), "current-context"))]
		case 2:
			data = []byte(fmt.Sprintf("contexts:\n- name: dangling-%d\n  context: {cluster: nowhere}\n", i))
		case 3:
			data = kubeconfig(t, ctxSpec{"keep-1", server(9999), "t"})
		case 4:
			if i%50 == 4 {
				name := fmt.Sprintf("storm-%d", i)
				data = kubeconfig(t, ctxSpec{name, server(10000 + i), "t"})
				want = append(want, "Added "+name+" "+server(10000+i))
			} else {
				data = []byte(strings.Repeat("{[", rng.IntN(500)))
			}
		}
		writeFile(t, path, data)
	}
	expectEvents(t, w, want...)

	w.Stop()
	wg.Wait()
	if len(errs) == 0 {
		t.Fatal("no errors reported")
	}
	for _, err := range errs {
		if !strings.Contains(err.Error(), filepath.Join(dir, "s-")) {
			t.Errorf("error does not name a storm file: %v", err)
		}
	}
	t.Logf("%d errors reported", len(errs))
}

func TestFileWatcherUnreadErrorsDoNotBlock(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := t.TempDir()
	for i := range 300 {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("broken-%03d", i)), []byte("clusters: [oops"))
	}
	writeFile(t, filepath.Join(dir, "good"), kubeconfig(t, ctxSpec{"good", server(1), "t"}))
	w := start(t, dir)
	expectEvents(t, w, "Added good "+server(1))
	writeLikeAnEditor(t, filepath.Join(dir, "later"), kubeconfig(t, ctxSpec{"later", server(2), "t"}))
	expectEvents(t, w, "Added later "+server(2))

	w.Stop()
	var n int
	var last error
	for err := range w.Errors() {
		n, last = n+1, err
	}
	if n == 0 || n > 300 {
		t.Errorf("%d errors buffered", n)
	}
	if !strings.Contains(last.Error(), "broken-299") {
		t.Errorf("the newest error should survive, last is %v", last)
	}
}

func TestFileWatcherStop(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := t.TempDir()
	const n = 300 // more than the Events buffer
	specs := make([]ctxSpec, 0, n)
	for i := range n {
		specs = append(specs, ctxSpec{fmt.Sprintf("c%03d", i), server(i), "t"})
	}
	writeFile(t, filepath.Join(dir, "many"), kubeconfig(t, specs...))
	w, err := configwatcher.NewFileWatcher(dir)
	if err != nil {
		t.Fatal(err)
	}
	<-w.Events() // the watcher is now blocked on an unread Events channel

	stopped := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(w.Stop)
		}
		wg.Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(patience):
		t.Fatal("Stop did not return")
	}
	w.Stop()

	for range w.Events() {
	}
	if _, ok := <-w.Errors(); ok {
		t.Error("Errors not closed")
	}
	// checkLeaks verifies that no goroutine is left.
}

// A file written the moment NewFileWatcher returns is never lost, whether
// the watcher's first read sees it or its watch does.
func TestFileWatcherFileWrittenRightAfterStart(t *testing.T) {
	leakcheck.Cleanup(t)
	for range 10 {
		dir := t.TempDir()
		w := start(t, dir)
		writeLikeAnEditor(t, filepath.Join(dir, "new.yaml"), kubeconfig(t, ctxSpec{"new", server(1), "t"}))
		expectEvents(t, w, "Added new "+server(1))
		w.Stop()
	}
}

// switchLink points link at target atomically, the way deploy tools switch
// a "current" release: a new link renamed over the old one.
func switchLink(t *testing.T, target, link string) {
	t.Helper()
	tmp := link + ".new"
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	mkdir(t, filepath.Dir(link))
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// A watched kubeconfig may not reach files outside its directory, nor may
// an entry of the directory be a link out of it, unless the caller allows
// the place; config's option and the watcher's shorthand are the same.
func TestFileWatcherFileReferencesStayInside(t *testing.T) {
	leakcheck.Cleanup(t)
	outside := t.TempDir()
	token := filepath.Join(outside, "token")
	writeFile(t, token, []byte("sa-token-OUTSIDE"))
	writeFile(t, filepath.Join(outside, "other.yaml"), kubeconfig(t, ctxSpec{"linked", server(2), "t"}))
	dir := t.TempDir()
	path := filepath.Join(dir, "steal.yaml")
	writeFile(t, path, []byte(`clusters:
- name: c
  cluster: {server: "`+server(1)+`", insecure-skip-tls-verify: true}
users:
- name: u
  user: {tokenFile: `+token+`}
contexts:
- name: steal
  context: {cluster: c, user: u}
`))
	symlink(t, filepath.Join(outside, "other.yaml"), filepath.Join(dir, "linked.yaml"))

	refused := start(t, dir)
	want := map[string][]string{
		"steal":  {path, `"steal"`, "tokenFile"},
		"linked": {filepath.Join(dir, "linked.yaml"), "symlink"},
	}
	deadline := time.After(patience)
	for len(want) > 0 {
		select {
		case err := <-refused.Errors():
			for k, parts := range want {
				if containsAll(err.Error(), parts) {
					delete(want, k)
					if !errors.Is(err, config.ErrFileReferenceRefused) || strings.Contains(err.Error(), "sa-token-OUTSIDE") {
						t.Errorf("err = %v, want ErrFileReferenceRefused without the token", err)
					}
				}
			}
		case <-deadline:
			t.Fatalf("not reported: %v", want)
		}
	}
	expectQuiet(t, refused)

	for _, opt := range []configwatcher.FileOption{
		configwatcher.AllowFileReferences(outside),
		configwatcher.WithLoadOptions(config.AllowFileReferences(outside)),
	} {
		allowed := start(t, dir, opt)
		evs := expectEvents(t, allowed, "Added steal "+server(1), "Added linked "+server(2))
		for _, ev := range evs {
			if ev.Config.Name == "steal" && ev.Config.Config.BearerTokenFile != token {
				t.Errorf("allowed token file = %q", ev.Config.Config.BearerTokenFile)
			}
		}
		allowed.Stop()
	}
}

// First come keeps the name: a newcomer file defining a context that a
// running cluster already has is the conflict, named as the loser, whatever
// its path; it takes over only when the original goes.
func TestFileWatcherFirstComeKeepsName(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := t.TempDir()
	original := filepath.Join(dir, "prod.yaml")
	writeFile(t, original, kubeconfig(t, ctxSpec{"prod", server(1), "t"}))
	w := start(t, dir)
	expectEvents(t, w, "Added prod "+server(1))

	newcomer := filepath.Join(dir, "00-x.yaml")
	writeFile(t, newcomer, kubeconfig(t, ctxSpec{"prod", server(666), "t"}))
	err := awaitError(t, w, newcomer, original, `"prod"`)
	var fe *config.FileError
	if !errors.As(err, &fe) || fe.Path != newcomer || fe.OtherPath != original || !errors.Is(err, config.ErrDuplicateContext) {
		t.Errorf("conflict = %v; want the newcomer %s as the loser", err, newcomer)
	}
	expectQuiet(t, w)

	// The original changes: still its cluster.
	writeLikeAnEditor(t, original, kubeconfig(t, ctxSpec{"prod", server(2), "t"}))
	expectEvents(t, w, "Updated prod "+server(2))

	if err := os.Remove(original); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, w, "Updated prod "+server(666))
}

// Editor and backup files are not kubeconfigs, even when they parse as one
// and claim a running cluster's name.
func TestFileWatcherSkipsEditorFiles(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "prod.yaml"), kubeconfig(t, ctxSpec{"prod", server(1), "t"}))
	w := start(t, dir)
	expectEvents(t, w, "Added prod "+server(1))
	for i, name := range []string{"#prod.yaml#", "prod.yaml~", ".prod.yaml.swp", "prod.yaml.swo", "prod.yaml.swx", "prod.yaml.bak", "prod.yaml.orig", "prod.yaml.tmp", "4913", "prod.yaml.lock", "sedX1y2Z3"} {
		writeFile(t, filepath.Join(dir, name), kubeconfig(t, ctxSpec{"prod", server(100 + i), "t"}, ctxSpec{fmt.Sprintf("leftover-%d", i), server(200 + i), "t"}))
	}
	expectQuiet(t, w)
	expectNoError(t, w)
}

// The watched path may run through symlinks anywhere: a deploy layout whose
// "current" link is switched, or a link chain through another directory.
// Each switch is one Updated per changed context and nothing else.
func TestFileWatcherFollowsSwitchedLinks(t *testing.T) {
	t.Run("root through a switched current link", func(t *testing.T) {
		leakcheck.Cleanup(t)
		base := t.TempDir()
		for i, rel := range []string{"v1", "v2"} {
			writeFile(t, filepath.Join(base, "releases", rel, "kubeconfigs", "a.yaml"),
				kubeconfig(t, ctxSpec{"prod", server(1 + i), "t"}, ctxSpec{"stable", server(9), "t"}))
		}
		symlink(t, filepath.Join("releases", "v1"), filepath.Join(base, "current"))
		w := start(t, filepath.Join(base, "current", "kubeconfigs"))
		expectEvents(t, w, "Added prod "+server(1), "Added stable "+server(9))

		switchLink(t, filepath.Join("releases", "v2"), filepath.Join(base, "current"))
		expectEvents(t, w, "Updated prod "+server(2))
		switchLink(t, filepath.Join("releases", "v1"), filepath.Join(base, "current"))
		expectEvents(t, w, "Updated prod "+server(1))
		expectNoError(t, w)
	})

	chain := func(t *testing.T, watched, base string, opts ...configwatcher.FileOption) {
		t.Helper()
		for i, rel := range []string{"v1", "v2"} {
			writeFile(t, filepath.Join(base, rel, "prod.yaml"), kubeconfig(t, ctxSpec{"prod", server(1 + i), "t"}))
		}
		symlink(t, "v1", filepath.Join(base, "current"))
		symlink(t, filepath.Join(base, "current", "prod.yaml"), filepath.Join(watched, "prod.yaml"))
		writeFile(t, filepath.Join(watched, "plain.yaml"), kubeconfig(t, ctxSpec{"plain", server(9), "t"}))
		w := start(t, watched, opts...)
		expectEvents(t, w, "Added prod "+server(1), "Added plain "+server(9))

		switchLink(t, "v2", filepath.Join(base, "current"))
		expectEvents(t, w, "Updated prod "+server(2))
		switchLink(t, "v1", filepath.Join(base, "current"))
		expectEvents(t, w, "Updated prod "+server(1))
		expectNoError(t, w)
	}
	t.Run("link chain inside the directory", func(t *testing.T) {
		leakcheck.Cleanup(t)
		watched := t.TempDir()
		chain(t, watched, filepath.Join(watched, ".base"))
	})
	t.Run("link chain through an allowed directory", func(t *testing.T) {
		leakcheck.Cleanup(t)
		base := t.TempDir()
		chain(t, t.TempDir(), base, configwatcher.AllowFileReferences(base))
	})
}

// "kubectl config delete-context" of a file's last context leaves the file
// saying "contexts: null", its clusters and users still there: the file's
// clusters are Deleted, and no error is reported. An empty file still keeps
// them.
func TestFileWatcherLastContextDeleted(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "team.yaml")
	writeFile(t, path, kubeconfig(t, ctxSpec{"a", server(1), "t"}, ctxSpec{"b", server(2), "t"}))
	w := start(t, dir)
	expectEvents(t, w, "Added a "+server(1), "Added b "+server(2))

	writeFile(t, path, nil)
	expectError(t, w, path, "no contexts")
	expectQuiet(t, w)
	writeFile(t, path, kubeconfig(t, ctxSpec{"a", server(1), "t"}, ctxSpec{"b", server(2), "t"}))
	expectQuiet(t, w)

	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	clear(cfg.Contexts)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, w, "Deleted a", "Deleted b")
	expectNoError(t, w)
}

// writeInTwoParts writes data to path in place, in two parts cut where cut
// begins, pausing in between as a slow writer does (a sync tool, a shell
// loop, a network file system).
func writeInTwoParts(t *testing.T, path string, data []byte, cut string, pause time.Duration) {
	t.Helper()
	i := strings.Index(string(data), cut)
	if i < 0 {
		t.Fatalf("%q not in %s", cut, data)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data[:i]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause) // the writer's pause, not an assertion
	if _, err := f.Write(data[i:]); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// A file caught half-written often still parses, with its later contexts
// missing. A writer that pauses for several debounce periods (but less than
// the settle period) and then finishes takes no cluster away; a file that
// keeps reading without them, for the settle period, does.
func TestFileWatcherHalfWrittenFileKeepsClusters(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "fleet.yaml")
	full := kubeconfig(t, ctxSpec{"a", server(1), "t"}, ctxSpec{"b", server(2), "t"}, ctxSpec{"c", server(3), "t"})
	writeFile(t, path, full)
	w := start(t, dir)
	expectEvents(t, w, "Added a "+server(1), "Added b "+server(2), "Added c "+server(3))

	writeInTwoParts(t, path, full, "- context:\n    cluster: b", 5*debounce)
	expectQuiet(t, w)
	expectQuiet(t, w) // past the settle period of the cut-off content

	writeLikeAnEditor(t, path, kubeconfig(t, ctxSpec{"a", server(10), "t"}))
	expectEvents(t, w, "Updated a "+server(10), "Deleted b", "Deleted c")
}

// A name belongs to the file that served it first; a slow rewrite of that
// file, caught without the context for a moment, does not hand the name to
// a newcomer defining it too. Once the owner's drop has settled, it does.
func TestFileWatcherSlowRewriteKeepsName(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	full := kubeconfig(t, ctxSpec{"a0", server(1), "t"}, ctxSpec{"prod", server(2), "t"})
	writeFile(t, a, full)
	w := start(t, dir)
	expectEvents(t, w, "Added a0 "+server(1), "Added prod "+server(2))
	writeFile(t, b, kubeconfig(t, ctxSpec{"prod", server(666), "t"}))
	expectError(t, w, b, a, `"prod"`)

	writeInTwoParts(t, a, full, "- context:\n    cluster: prod", 5*debounce)
	expectQuiet(t, w)
	expectQuiet(t, w)

	writeLikeAnEditor(t, a, kubeconfig(t, ctxSpec{"a0", server(1), "t"}))
	expectEvents(t, w, "Updated prod "+server(666))
}
