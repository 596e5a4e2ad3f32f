package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// apiServerProcess lets a test take a cluster's kube-apiserver down and bring
// it back on the same address, with the same certificates and the same etcd
// (so the same data), the way a crashed or restarted control plane behaves.
// envtest has no such call, so the process is found by its command line.
type apiServerProcess struct {
	mu        sync.Mutex
	path      string
	args      []string
	pid       int
	restarted *exec.Cmd
	waitDone  chan struct{}
}

// find records the kube-apiserver that env started: a child of this process
// whose command line names env's secure port.
func (p *apiServerProcess) find(env *envtest.Environment) error {
	port := env.ControlPlane.APIServer.Port
	want := "--secure-port=" + port
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("test: listing processes: %w", err)
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || parentOf(pid) != self {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if len(argv) == 0 || filepath.Base(argv[0]) != "kube-apiserver" {
			continue
		}
		if slices.Contains(argv[1:], want) {
			p.path, p.args, p.pid = argv[0], argv[1:], pid
			return nil
		}
	}
	return fmt.Errorf("test: kube-apiserver on port %s not found among this process's children", port)
}

func parentOf(pid int) int {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return -1
	}
	// The command name may hold spaces and parentheses; fields restart
	// after the last ')'.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 2 {
		return -1
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// StopAPIServer kills the cluster's kube-apiserver (SIGKILL, like a crash)
// and returns once it has exited. etcd keeps running, so StartAPIServer
// brings back the same data. Clients see connection refused meanwhile.
func (c *Cluster) StopAPIServer() error {
	p := &c.proc
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pid == 0 {
		return errors.New("test: API server is not running")
	}
	if p.restarted != nil {
		_ = p.restarted.Process.Kill()
		<-p.waitDone
		p.restarted, p.pid = nil, 0
		return nil
	}
	if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("test: killing kube-apiserver %d: %w", p.pid, err)
	}
	// envtest waits on its child, so it is reaped there; poll until gone.
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(p.pid, 0) == nil && parentOf(p.pid) == os.Getpid() {
		if time.Now().After(deadline) {
			return fmt.Errorf("test: kube-apiserver %d did not exit", p.pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.pid = 0
	return nil
}

// StartAPIServer starts the cluster's kube-apiserver again after
// StopAPIServer, on the same address with the same certificates, and waits
// until it is ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	p := &c.proc
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pid != 0 {
		return errors.New("test: API server is already running")
	}
	cmd := exec.Command(p.path, p.args...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("test: restarting kube-apiserver: %w", err)
	}
	p.restarted, p.pid = cmd, cmd.Process.Pid
	p.waitDone = make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(p.waitDone)
	return waitReady(ctx, c.Config)
}

// stopRestarted stops an API server that StartAPIServer started.
func (p *apiServerProcess) stopRestarted() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.restarted == nil {
		return nil
	}
	_ = p.restarted.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.waitDone:
	case <-time.After(30 * time.Second):
		_ = p.restarted.Process.Kill()
		<-p.waitDone
	}
	p.restarted, p.pid = nil, 0
	return nil
}

func withCodec(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.NegotiatedSerializer = serializer.WithoutConversionCodecFactory{CodecFactory: scheme.Codecs}
	return cfg
}
