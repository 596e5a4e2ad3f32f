package sample_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/mccr-dev/mccr/sample/internal/reconciler"
	"github.com/mccr-dev/mccr/test"
)

const (
	// patience bounds every wait for something that should happen; the
	// machine may be busy.
	patience = 60 * time.Second
	// stopBound bounds how long a sample may take to exit after SIGTERM.
	stopBound = 30 * time.Second
)

var (
	// bin holds the samples, built once for the whole package.
	bin string

	// The package's fleet, started by the first test that needs it (the
	// demo tests start their own, so they run without it) and stopped by
	// TestMain.
	fleetOnce sync.Once
	fleet     *test.Fleet
	fleetErr  error
)

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	// envtest logs through controller-runtime's logger; the samples' logs
	// are what these tests read.
	logf.SetLogger(logr.Discard())
	dir, err := os.MkdirTemp("", "mccr-samples-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	bin = dir
	code := m.Run()
	if fleet != nil {
		if err := fleet.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the fleet: %v\n", err)
			code = 1
		}
	}
	return code
}

// build compiles every sample as a user would, with the race detector
// when the tests have it, so that a race anywhere on the way is caught.
func build(dir string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	args := []string{"build"}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "-o", dir+string(filepath.Separator), "./basic", "./filewatcher", "./kubefed", "./inventory", "./demo", "./sharded")
	cmd := exec.Command(goBin, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// sharedFleet is a host and two members: m1 and m2.
func sharedFleet(t *testing.T) *test.Fleet {
	t.Helper()
	fleetOnce.Do(func() { fleet, fleetErr = test.Start(test.Options{}, "host", "m1", "m2") })
	if fleetErr != nil {
		t.Fatalf("starting the fleet: %v", fleetErr)
	}
	return fleet
}

// process is a sample running as a subprocess.
type process struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
	err  error // set when done is closed
}

func start(t *testing.T, name string, args ...string) *process {
	t.Helper()
	return startCmd(t, name, exec.Command(filepath.Join(bin, name), args...))
}

func startCmd(t *testing.T, name string, cmd *exec.Cmd) *process {
	t.Helper()
	p := &process{t: t, name: name, cmd: cmd, out: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("output of %s:\n%s", name, p.tail(200))
		}
	})
	return p
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitErr returns what Wait returned once p exited, or an error saying
// "exit status 0" for a clean exit, for a caller that wants an error.
func (p *process) exitErr() error {
	if p.err == nil {
		return errors.New("exit status 0")
	}
	return p.err
}

// tail returns the last n lines of the output.
func (p *process) tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.out.String(), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// logLine finds a JSON log line with the message msg and every key/value
// of kv.
func (p *process) logLine(msg string, kv ...string) bool {
	sc := bufio.NewScanner(strings.NewReader(p.out.String()))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec["msg"] != msg {
			continue
		}
		match := true
		for i := 0; i+1 < len(kv); i += 2 {
			if fmt.Sprint(rec[kv[i]]) != kv[i+1] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

func (p *process) waitLog(msg string, kv ...string) {
	p.t.Helper()
	eventually(p.t, fmt.Sprintf("%s to log %q %v", p.name, msg, kv), func() (bool, error) {
		if p.logLine(msg, kv...) {
			return true, nil
		}
		if p.exited() {
			return false, fmt.Errorf("%s exited: %w", p.name, p.exitErr())
		}
		return false, nil
	})
}

// terminate sends SIGTERM and checks that the sample exits 0 within
// stopBound, without a race report.
func (p *process) terminate() {
	p.t.Helper()
	if p.exited() {
		p.t.Fatalf("%s exited early: %v", p.name, p.err)
	}
	begin := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(stopBound):
		p.t.Fatalf("%s still running %s after SIGTERM", p.name, stopBound)
	}
	if p.err != nil {
		p.t.Fatalf("%s exited with %v after SIGTERM, want exit code 0", p.name, p.err)
	}
	if strings.Contains(p.out.String(), "DATA RACE") {
		p.t.Fatalf("%s reported a data race", p.name)
	}
	p.t.Logf("%s exited 0, %s after SIGTERM", p.name, time.Since(begin).Round(time.Millisecond))
}

// eventually waits, at most patience, until cond holds; an error from cond
// fails the test at once (a sample that exited will not recover).
func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	test.Eventually(t, patience, what, func() bool {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		return ok
	})
}

// createConfigMap creates a ConfigMap, opted in to the samples' reconciler
// or not.
func createConfigMap(t *testing.T, c client.Client, ns, name string, enabled bool) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": "v"}}
	if enabled {
		cm.Labels = map[string]string{reconciler.EnabledLabel: "true"}
	}
	if err := c.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
}

func seenIn(ctx context.Context, c client.Client, ns, name string) (string, error) {
	var cm corev1.ConfigMap
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cm); err != nil {
		return "", err
	}
	return cm.Annotations[reconciler.SeenInAnnotation], nil
}

// waitSeenIn waits until the ConfigMap carries the stamp of cluster, read
// straight from the member's API server.
func waitSeenIn(t *testing.T, c client.Client, ns, name, cluster string) {
	t.Helper()
	eventually(t, fmt.Sprintf("ConfigMap %s/%s in %s to be stamped", ns, name, cluster), func() (bool, error) {
		got, err := seenIn(t.Context(), c, ns, name)
		if err != nil {
			return false, err
		}
		if got != "" && got != cluster {
			return false, fmt.Errorf("stamped %q, want %q", got, cluster)
		}
		return got == cluster, nil
	})
}

// dropKubeconfig copies a kubeconfig into dir without the watcher ever
// seeing it half-written: hidden name first, then rename.
func dropKubeconfig(t *testing.T, c *test.Cluster, dir string) {
	t.Helper()
	data, err := os.ReadFile(c.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "."+c.Name+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, c.Name+".kubeconfig")); err != nil {
		t.Fatal(err)
	}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
