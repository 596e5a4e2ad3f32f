//go:build linux

package test_test

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A test binary killed with SIGKILL (as go test -timeout's hard kill, or
// the OOM killer, ends one) takes its API servers and etcds with it.
func TestKilledTestBinaryLeavesNoAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an API server in a child process; make test runs it")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperFleetEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
		}
	})
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "READY ") {
		t.Fatalf("helper did not start its fleet: %q, %v", line, err)
	}
	// The API servers inherit the pipe; keep it drained.
	go func() { _, _ = io.Copy(io.Discard, r) }()
	kids := children(t, cmd.Process.Pid)
	if len(kids) != 2 {
		t.Fatalf("want the helper's kube-apiserver and etcd, found %v", kids)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Only the helper: cmd.Wait would also wait for the pipe, which
	// surviving API servers would hold open.
	_, _ = cmd.Process.Wait()
	waited = true
	deadline := time.Now().Add(20 * time.Second)
	for pid, name := range kids {
		for alive(pid) {
			if time.Now().After(deadline) {
				for pid := range kids {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				t.Fatalf("%s (pid %d) survived the SIGKILL of the test binary that started it", name, pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("%d processes gone with the killed binary: %v", len(kids), kids)
	// The fleet's directory is left behind (nothing ran to remove it);
	// it holds no process any more.
	_ = os.RemoveAll(strings.TrimSpace(strings.TrimPrefix(line, "READY ")))
}

// children returns the kube-apiserver and etcd processes whose parent is
// pid, by pid.
func children(t *testing.T, pid int) map[int]string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ..."; comm may hold spaces.
		i := bytes.LastIndexByte(raw, ')')
		f := strings.Fields(string(raw[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		comm := string(raw[bytes.IndexByte(raw, '(')+1 : i])
		if comm == "kube-apiserver" || comm == "etcd" {
			out[p] = comm
		}
	}
	return out
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(raw, ')')
	f := strings.Fields(string(raw[i+1:]))
	return len(f) > 0 && f[0] != "Z"
}
