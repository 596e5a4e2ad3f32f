package test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// ErrFaultInjectionUnsupported is returned by StopAPIServer where the kit
// cannot find a cluster's kube-apiserver process (outside Linux).
var ErrFaultInjectionUnsupported = errors.New("API server fault injection is not supported here")

// apiServerProcess lets a test take a cluster's kube-apiserver down and bring
// it back on the same address, with the same certificates and the same etcd
// (so the same data), the way a crashed or restarted control plane behaves.
// envtest has no such call; the process's pid and command line come from
// the shim that started it (see shim_linux.go).
type apiServerProcess struct {
	mu        sync.Mutex
	shimDir   string // "" without a shim
	path      string
	args      []string
	pid       int  // of the running kube-apiserver, once known
	down      bool // stopped by StopAPIServer, not started again
	restarted *exec.Cmd
	waitDone  chan struct{}
}

// locate reads, on first use, the pid and command line of the
// kube-apiserver envtest started. Call with p.mu held.
func (p *apiServerProcess) locate() error {
	if p.path != "" {
		return nil
	}
	pid, argv, err := shimProcess(p.shimDir, "kube-apiserver")
	if err != nil {
		return err
	}
	p.pid, p.path, p.args = pid, argv[0], argv[1:]
	return nil
}

// StopAPIServer kills the cluster's kube-apiserver (SIGKILL, like a crash)
// and returns once it has exited. etcd keeps running, so StartAPIServer
// brings back the same data. Clients see connection refused meanwhile.
// It is supported on Linux; elsewhere it returns an error wrapping
// ErrFaultInjectionUnsupported.
func (c *Cluster) StopAPIServer() error {
	p := &c.proc
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.locate(); err != nil {
		return err
	}
	if p.down {
		return errors.New("test: API server is not running")
	}
	return p.kill()
}

// kill SIGKILLs the running kube-apiserver and waits until it is gone.
// Call with p.mu held.
func (p *apiServerProcess) kill() error {
	p.down = true
	if p.restarted != nil {
		_ = p.restarted.Process.Kill()
		<-p.waitDone
		p.restarted = nil
		return nil
	}
	if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("test: killing kube-apiserver %d: %w", p.pid, err)
	}
	// envtest waits on its child, so it is reaped there; poll until gone.
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(p.pid, 0) == nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("test: kube-apiserver %d did not exit", p.pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// StartAPIServer starts the cluster's kube-apiserver again after
// StopAPIServer, on the same address with the same certificates, and waits
// until it is ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	p := &c.proc
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.path == "" || !p.down {
		return errors.New("test: API server is already running")
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("test: restarting kube-apiserver: %w", err)
	}
	p.restarted, p.pid, p.down = cmd, cmd.Process.Pid, false
	p.waitDone = make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(p.waitDone)
	return waitReady(ctx, c.Config)
}

// stopFast takes the kube-apiserver down before envtest stops the
// cluster: a test cluster needs no graceful shutdown, and one with clients
// still watching it (a Server not stopped yet) can take envtest's whole
// stop timeout to drain them. Without a shim, envtest's stop does it all.
func (p *apiServerProcess) stopFast() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shimDir == "" {
		return nil
	}
	if p.locate() != nil {
		return nil // never started: nothing to take down
	}
	if p.down {
		return nil
	}
	return p.kill()
}

// ignoreGone drops the errors envtest reports for a process that had
// already exited when it tried to stop it (an aggregate is filtered error
// by error).
func ignoreGone(err error) error {
	if agg, ok := err.(interface{ Errors() []error }); ok {
		var keep []error
		for _, e := range agg.Errors() {
			if e = ignoreGone(e); e != nil {
				keep = append(keep, e)
			}
		}
		return errors.Join(keep...)
	}
	if err == nil || errors.Is(err, syscall.ESRCH) || errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

func withCodec(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.NegotiatedSerializer = serializer.WithoutConversionCodecFactory{CodecFactory: scheme.Codecs}
	return cfg
}
