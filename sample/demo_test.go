package sample_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// tourBound: the tour takes well under two minutes with the binaries
	// built; the bound leaves room for a loaded machine and -race.
	tourBound = 3 * time.Minute
	// interruptBound: after Ctrl-C the demo may first have to wait for API
	// servers still starting, then stop them all.
	interruptBound = 90 * time.Second
)

// TestDemoTour runs the demo (`make demo`) as a subprocess: the scripted
// tour must finish, show the live add and the live remove, exit 0 and
// leave nothing behind.
func TestDemoTour(t *testing.T) {
	d := startDemo(t)
	d.wait(t, tourBound)
	if d.p.err != nil {
		t.Fatalf("demo exited with %v, want 0", d.p.err)
	}
	out := d.p.out.String()
	for _, want := range []string{
		"member-1 joined the fleet", "member-2 joined the fleet", "member-3 joined the fleet",
		"reconciler, running for member-1: stamped ConfigMap demo/greeting",
		"reconciler, running for member-2: stamped ConfigMap demo/greeting",
		"reconciler, running for member-3: stamped ConfigMap demo/greeting",
		// The live add: member-4's kubeconfig dropped in while running.
		"member-4 joined the fleet",
		"reconciler, running for member-4: stamped ConfigMap demo/greeting",
		// The live remove.
		"member-2 left the fleet",
		"member-2's after-removal stayed unstamped",
		"Tour done.",
		"stopped 5 API servers",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the demo's output lacks %q", want)
		}
	}
	if strings.Contains(out, "DATA RACE") {
		t.Error("the demo reported a data race")
	}
	d.checkClean(t)
}

// TestDemoInterrupt sends the demo SIGINT (Ctrl-C) while its API servers
// start, in the middle of the tour, and after the tour with --wait: it must
// stop them and remove its files every time. An interrupted tour exits
// 130; Ctrl-C is the normal end of --wait, which exits 0.
func TestDemoInterrupt(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: slow, starts three fleets of five API servers; make test runs it")
	}
	for _, tc := range []struct {
		name  string
		args  []string
		after string
		code  int
	}{
		{"WhileStarting", nil, "Starting 5 Kubernetes API servers", 130},
		{"MidTour", nil, "Step 3 of 5", 130},
		{"Wait", []string{"--wait"}, "Press Ctrl-C", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startDemo(t, tc.args...)
			eventually(t, "the demo to print "+strconv.Quote(tc.after), func() (bool, error) {
				if d.p.exited() {
					return false, fmt.Errorf("the demo exited early: %w", d.p.exitErr())
				}
				return strings.Contains(d.p.out.String(), tc.after), nil
			})
			if err := d.p.cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			d.wait(t, interruptBound)
			code := 0
			if d.p.err != nil {
				var exit *exec.ExitError
				if !errors.As(d.p.err, &exit) {
					t.Fatal(d.p.err)
				}
				code = exit.ExitCode()
			}
			if code != tc.code {
				t.Errorf("demo exited with code %d after Ctrl-C, want %d", code, tc.code)
			}
			d.checkClean(t)
		})
	}
}

// demoRun is one run of the demo with its own TMPDIR, and a record of
// every process it started.
type demoRun struct {
	p       *process
	tmp     string
	stop    chan struct{}
	stopped chan struct{}

	mu   sync.Mutex
	seen map[int]string // pid → program, for every kube-apiserver and etcd seen
}

func startDemo(t *testing.T, args ...string) *demoRun {
	t.Helper()
	d := &demoRun{tmp: t.TempDir(), stop: make(chan struct{}), stopped: make(chan struct{}), seen: map[int]string{}}
	args = append([]string{"--log-file", filepath.Join(t.TempDir(), "demo.log")}, args...)
	cmd := exec.Command(filepath.Join(bin, "demo"), args...)
	// Everything the demo writes (and its API servers' data) goes under
	// its TMPDIR, which must be empty again after it exits.
	cmd.Env = append(os.Environ(), "TMPDIR="+d.tmp)
	d.p = startCmd(t, "demo", cmd)
	go d.watch(d.p.cmd.Process.Pid)
	t.Cleanup(d.stopWatching)
	return d
}

// watch records the API servers and etcds the demo starts: its children,
// and anything whose command line names its TMPDIR.
func (d *demoRun) watch(demo int) {
	defer close(d.stopped)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		for pid, argv := range processes() {
			prog := filepath.Base(argv[0])
			if prog != "kube-apiserver" && prog != "etcd" {
				continue
			}
			if parentOf(pid) == demo || strings.Contains(strings.Join(argv, " "), d.tmp) {
				d.mu.Lock()
				d.seen[pid] = prog
				d.mu.Unlock()
			}
		}
		select {
		case <-d.stop:
			return
		case <-tick.C:
		}
	}
}

func (d *demoRun) stopWatching() {
	select {
	case <-d.stop:
	default:
		close(d.stop)
	}
	<-d.stopped
}

func (d *demoRun) wait(t *testing.T, bound time.Duration) {
	t.Helper()
	begin := time.Now()
	select {
	case <-d.p.done:
		t.Logf("demo exited after %s: %v", time.Since(begin).Round(100*time.Millisecond), d.p.err)
	case <-time.After(bound):
		t.Fatalf("demo still running after %s", bound)
	}
	d.stopWatching()
}

// checkClean checks that no kube-apiserver or etcd the demo started
// outlives it, and that it removed every file it wrote.
func (d *demoRun) checkClean(t *testing.T) {
	t.Helper()
	d.mu.Lock()
	seen := d.seen
	d.mu.Unlock()
	counts := map[string]int{}
	for _, prog := range seen {
		counts[prog]++
	}
	// Five clusters each: otherwise the watch missed them and proves
	// nothing. (Started later than the interrupt, a few may be missing.)
	if counts["etcd"] == 0 || counts["kube-apiserver"] == 0 {
		t.Errorf("saw %v processes of the demo; the check below proves nothing", counts)
	}
	t.Logf("the demo ran %d etcd and %d kube-apiserver processes", counts["etcd"], counts["kube-apiserver"])
	running := processes()
	for pid, prog := range seen {
		if argv, ok := running[pid]; ok && filepath.Base(argv[0]) == prog {
			t.Errorf("%s (pid %d) still runs after the demo exited", prog, pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	for pid, argv := range running {
		if strings.Contains(strings.Join(argv, " "), d.tmp) {
			t.Errorf("pid %d still runs from the demo's TMPDIR: %s", pid, argv[0])
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	left, err := os.ReadDir(d.tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("the demo left %s behind", filepath.Join(d.tmp, e.Name()))
	}
}

// processes returns the command line of every process, by pid.
func processes() map[int][]string {
	out := map[int][]string{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue // gone, or a zombie
		}
		out[pid] = strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	}
	return out
}

// parentOf returns a process's parent pid, or -1.
func parentOf(pid int) int {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return -1
	}
	// The command name may hold spaces and parentheses; the fields after
	// the last ')' are state, then parent pid.
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return ppid
}
