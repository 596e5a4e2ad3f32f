//go:build linux

package e2e

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/mccr-dev/mccr/test"
)

// hostileSecret stands for the controller's own ServiceAccount token: a
// file outside the watched directory that hostile kubeconfigs reach for.
const hostileSecret = "sa-token-HOSTILE-0123456789abcdef"

// openWatch reports every open and read of the files of one directory, via
// inotify: the proof that nothing outside the watched source is read.
type openWatch struct {
	fd     int
	mu     sync.Mutex
	opened []string
	done   chan struct{}
}

func watchOpens(t testing.TB, dir string) *openWatch {
	t.Helper()
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.InotifyAddWatch(fd, dir, syscall.IN_OPEN|syscall.IN_ACCESS); err != nil {
		t.Fatal(err)
	}
	ow := &openWatch{fd: fd, done: make(chan struct{})}
	go func() {
		defer close(ow.done)
		buf := make([]byte, 64<<10)
		for {
			n, err := syscall.Read(fd, buf)
			if err != nil || n <= 0 {
				return
			}
			for off := 0; off+syscall.SizeofInotifyEvent <= n; {
				ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off])) //nolint:gosec // the kernel's event layout
				name := strings.TrimRight(string(buf[off+syscall.SizeofInotifyEvent:off+syscall.SizeofInotifyEvent+int(ev.Len)]), "\x00")
				if ev.Mask&syscall.IN_ISDIR == 0 {
					ow.mu.Lock()
					ow.opened = append(ow.opened, name)
					ow.mu.Unlock()
				}
				off += syscall.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}()
	return ow
}

// stop ends the watch and returns the files that were opened or read.
func (ow *openWatch) stop() []string {
	_ = syscall.Close(ow.fd)
	select {
	case <-ow.done:
	case <-time.After(2 * time.Second):
	}
	ow.mu.Lock()
	defer ow.mu.Unlock()
	return slices.Clone(ow.opened)
}

// hostileKubeconfig is a kubeconfig of one context whose cluster and user
// carry the given extra fields.
func hostileKubeconfig(name, server, cluster, user string) []byte {
	if cluster == "" {
		cluster = ", insecure-skip-tls-verify: true"
	}
	return []byte(`clusters:
- name: c
  cluster: {server: "` + server + `"` + cluster + `}
users:
- name: u
  user: {` + user + `}
contexts:
- name: ` + strconv.Quote(name) + `
  context: {cluster: c, user: u}
`)
}

// hostileEntry lays out the i-th hostile entry of dir and says whether it
// must be reported by name (a refused or broken kubeconfig) or skipped
// without a word (not a regular file: a FIFO, a socket, a dangling link, a
// loop, a directory). outside holds the secret, a trap FIFO and a good
// kubeconfig for cluster "a".
func hostileEntry(t testing.TB, dir, outside, attacker string, i int) (path string, reported bool) {
	t.Helper()
	name := func(kind string) string {
		return filepath.Join(dir, fmt.Sprintf("hostile-%04d-%s.kubeconfig", i, kind))
	}
	write := func(p string, data []byte) {
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	ctx := fmt.Sprintf("hostile-%d", i)
	secret := filepath.Join(outside, "token")
	switch i % 20 {
	case 0:
		path = name("token-outside")
		write(path, hostileKubeconfig(ctx, attacker, "", "tokenFile: "+secret))
	case 1:
		path = name("token-environ")
		write(path, hostileKubeconfig(ctx, attacker, "", "tokenFile: /proc/self/environ"))
	case 2:
		path = name("cert-shadow")
		write(path, hostileKubeconfig(ctx, attacker, "", "client-certificate: /etc/shadow, client-key: /etc/shadow"))
	case 3:
		path = name("ca-zero")
		write(path, hostileKubeconfig(ctx, attacker, ", certificate-authority: /dev/zero", "token: x"))
	case 4:
		fifo := filepath.Join(dir, fmt.Sprintf(".fifo-%d", i))
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatalf("mkfifo: %v", err)
		}
		path = name("token-fifo")
		write(path, hostileKubeconfig(ctx, attacker, "", "tokenFile: "+filepath.Base(fifo)))
	case 5:
		path = name("link-shadow")
		link("/etc/shadow", path)
	case 6:
		path = name("link-zero")
		link("/dev/zero", path) // a device: skipped, never opened
		return path, false
	case 7:
		path = name("link-environ")
		link("/proc/self/environ", path)
	case 8:
		path = name("link-trap")
		link(filepath.Join(outside, "trap"), path) // a FIFO: skipped, never opened
		return path, false
	case 9:
		path = name("dangling")
		link(filepath.Join(dir, "nowhere", "at-all"), path)
		return path, false
	case 10:
		path = name("loop")
		link(filepath.Base(path)+".other", path)
		link(filepath.Base(path), path+".other")
		return path, false
	case 11:
		path = name("socket")
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			// A socket path is limited to about 100 bytes.
			path = filepath.Join(dir, fmt.Sprintf("s%d", i))
			if l, err = net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"}); err != nil {
				t.Fatal(err)
			}
		}
		l.SetUnlinkOnClose(false)
		t.Cleanup(func() { _ = l.Close() })
		return path, false
	case 12:
		path = name("huge")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(1 << 30); err != nil { // sparse: a gigabyte of nothing
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	case 13:
		path = name("sparse")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("clusters: ["), 64<<10); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	case 14:
		path = name("deep")
		deep := path
		for range 40 {
			deep = filepath.Join(deep, "d")
		}
		if err := os.MkdirAll(deep, 0o700); err != nil {
			t.Fatal(err)
		}
		write(filepath.Join(deep, "config"), hostileKubeconfig(ctx, attacker, "", "token: x"))
		return path, false
	case 15:
		path = filepath.Join(dir, fmt.Sprintf("hostile-%04d\nlevel=error msg=forged.kubeconfig", i))
		write(path, hostileKubeconfig(ctx, attacker, "", "tokenFile: "+secret))
	case 16:
		path = name("link-good-elsewhere")
		link(filepath.Join(outside, "a.kubeconfig"), path)
	case 17:
		// A newcomer claiming a running cluster's name.
		path = name("claims-a")
		write(path, hostileKubeconfig("a", attacker, "", "token: x"))
	case 18:
		path = name("password-url")
		u := strings.Replace(attacker, "https://", "https://admin:hunter2secret@", 1)
		write(path, hostileKubeconfig(ctx, u, "", "tokenFile: "+secret))
	default:
		tok := filepath.Join(dir, fmt.Sprintf(".tok-%d", i))
		link(secret, tok)
		path = name("token-via-link")
		write(path, hostileKubeconfig(ctx, attacker, "", "tokenFile: "+filepath.Base(tok)))
	}
	return path, true
}

// TestHostileDirectoryKeepsFleetSafe throws 1000 hostile entries at a
// directory the Server watches while two good members have steady work.
// Nothing outside the directory is opened, nothing blocks or hangs, no
// request reaches the attacker, every refused or broken kubeconfig is
// reported by name without its secrets, the members miss no reconcile, and
// the watcher still serves a good file afterwards.
func TestHostileDirectoryKeepsFleetSafe(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: slow test against real API servers; make test runs it")
	}
	const n, files = 5, 1000
	ns := namespace(t, "hostile")

	var attacked atomic.Int64
	var leakedMu sync.Mutex
	var leaked []string
	attacker := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attacked.Add(1)
		if h := r.Header.Get("Authorization"); h != "" {
			leakedMu.Lock()
			leaked = append(leaked, h)
			leakedMu.Unlock()
		}
	}))
	attacker.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	attacker.StartTLS()
	defer attacker.Close()

	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "token"), []byte(hostileSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(outside, "trap"), 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	if err := test.WriteKubeconfig(filepath.Join(outside, "a.kubeconfig"), "hijack", fleet.Cluster("a").Config); err != nil {
		t.Fatal(err)
	}

	d := newWatchedDir(t, ns, n)
	dir, r := d.dir, d.r
	opens := watchOpens(t, outside)
	w := newWorkload(t, r.rec, ns, n, membersNamed("a", "b"), 2*time.Second)
	w.start()
	began := time.Now()
	var mustReport []string
	skipped := 0
	for i := range files {
		p, rep := hostileEntry(t, dir, outside, attacker.URL, i)
		if rep {
			mustReport = append(mustReport, p)
		} else {
			skipped++
		}
	}
	unreported := func() []string {
		return d.unreported(mustReport, func(msg, p string) bool { return contains(msg, p) || contains(msg, strconv.Quote(p)) })
	}
	test.Eventually(t, 90*time.Second, "every hostile kubeconfig reported by name", func() bool { return len(unreported()) == 0 })
	allReported := time.Since(began)

	// The watcher still serves: a good file is picked up at once.
	goodAt := time.Now()
	if err := test.WriteKubeconfig(filepath.Join(dir, "zz-c.kubeconfig"), "c", fleet.Cluster("c").Config); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 30*time.Second, "a good file added after the storm", func() bool { return d.sawEvent("Added c") })
	goodLatency := time.Since(goodAt)
	w.waitRounds(t, 3)
	w.stop()
	opened := opens.stop()
	added, reported := d.stop()

	if missing := unreported(); len(missing) > 0 {
		t.Errorf("not reported: %v", missing)
	}
	if len(opened) > 0 {
		t.Errorf("files outside the watched directory were opened or read: %v", opened)
	}
	if got := attacked.Load(); got != 0 {
		t.Errorf("the attacker received %d requests (authorization headers: %q)", got, leaked)
	}
	for _, e := range reported {
		for _, secret := range []string{hostileSecret, "hunter2secret"} {
			if strings.Contains(e, secret) {
				t.Errorf("a reported error discloses a secret: %.200q", e)
			}
		}
	}
	for _, e := range r.srv.WatchErrors() {
		if strings.Contains(e.Err.Error(), hostileSecret) || strings.Contains(e.Err.Error(), "hunter2secret") {
			t.Errorf("the Server kept an error disclosing a secret: %.200q", e.Err.Error())
		}
	}
	for _, ev := range added {
		if ev != "Added a" && ev != "Added b" && ev != "Added c" {
			t.Errorf("the observer saw %s", ev)
		}
	}
	d.checkUndisturbed(t, "storm", "a", "b", "c")
	sum := w.summary()
	w.report(t, "hostile: members a, b")
	t.Logf("figure: hostile: %d entries (%d refused or broken kubeconfigs, %d non-files skipped), all reported by name in %s; %d errors; a good file served %s after; %d files outside opened; %d requests to the attacker",
		files, len(mustReport), skipped, dur(allReported), len(reported), dur(goodLatency), len(opened), attacked.Load())
	t.Logf("figure: hostile: %d rounds, %d reconciles checked, %d misses; write→reconcile p50 %s, p99 %s, max %s", sum.rounds, sum.checked, sum.missed, dur(sum.p50), dur(sum.p99), dur(sum.maxLag))
}
