package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mccr-dev/mccr/sample/internal/reconciler"
	"github.com/mccr-dev/mccr/server"
)

var printMu sync.Mutex

// sayf prints one line of the story, stamped with the time since the demo
// started. Safe from any goroutine.
func (d *demo) sayf(format string, args ...any) {
	printMu.Lock()
	defer printMu.Unlock()
	fmt.Printf("[%5.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

// exists says whether a file the demo is about to name in a hint is there:
// a hint never names a file that is gone.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// freeLoopbackAddr returns a loopback address whose port is free now, so
// that the demo can tell where its metrics server (and fleet page) listens.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port for the metrics server: %w", err)
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

func since(t time.Time) string {
	return time.Since(t).Round(100 * time.Millisecond).String()
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return errInterrupted
	}
}

// waitFor polls cond until it holds, for at most patience.
func (d *demo) waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(patience)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %s for %s", patience, what)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

func (d *demo) readyCount() int {
	n := 0
	for _, st := range d.srv.Statuses() {
		if st.Phase == server.PhaseReady {
			n++
		}
	}
	return n
}

// narrate tells how the fleet changes, as the server sees it, until ctx
// ends.
func (d *demo) narrate(ctx context.Context) {
	prev := map[string]server.ClusterStatus{}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		cur := map[string]server.ClusterStatus{}
		for _, st := range d.srv.Statuses() {
			cur[st.Name] = st
			old, known := prev[st.Name]
			if !known {
				d.sayf("  %s joined the fleet (%s)", st.Name, filepath.Base(st.Source.File))
			}
			if known && old.Phase == st.Phase {
				continue
			}
			switch st.Phase {
			case server.PhaseReady:
				d.sayf("  %s is ready (connected, caches synced in %s): the reconciler runs there now", st.Name, st.TimeToReady.Round(time.Millisecond))
			case server.PhaseFailed:
				d.sayf("  %s failed (%v); retrying in %s", st.Name, st.LastError, time.Until(st.NextRetry).Round(100*time.Millisecond))
			default:
				// The story tells when a cluster is ready or has failed; the
				// other phases are steps on the way, and leaving is told
				// below.
			}
		}
		for name := range prev {
			if _, ok := cur[name]; !ok {
				d.sayf("  %s left the fleet: its reconciler and caches are stopped", name)
			}
		}
		prev = cur
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// onStamped is the reconciler's report of its own work.
func (d *demo) onStamped(cluster string, key types.NamespacedName) {
	d.mu.Lock()
	d.stamped[cluster]++
	d.mu.Unlock()
	d.sayf("  reconciler, running for %s: stamped ConfigMap %s with %s=%s", cluster, key, reconciler.SeenInAnnotation, cluster)
}

// createConfigMap creates an opted-in ConfigMap in a member, straight
// through that member's API server, as a user with kubectl would.
func (d *demo) createConfigMap(ctx context.Context, member, name string) error {
	c := d.clients[member]
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return d.interrupted(ctx, fmt.Errorf("%s: creating namespace %s: %w", member, namespace, err))
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name,
			Labels: map[string]string{reconciler.EnabledLabel: "true"},
		},
		Data: map[string]string{"message": "hello from " + member},
	}
	if err := c.Create(ctx, cm); err != nil {
		return d.interrupted(ctx, fmt.Errorf("%s: creating ConfigMap %s/%s: %w", member, namespace, name, err))
	}
	return nil
}

// seenIn reads a ConfigMap's stamp straight from the member's API server.
func (d *demo) seenIn(ctx context.Context, member, name string) (string, error) {
	var cm corev1.ConfigMap
	if err := d.clients[member].Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &cm); err != nil {
		return "", d.interrupted(ctx, fmt.Errorf("%s: reading ConfigMap %s/%s: %w", member, namespace, name, err))
	}
	return cm.Annotations[reconciler.SeenInAnnotation], nil
}

func (d *demo) waitStamped(ctx context.Context, member, name string) error {
	return d.waitFor(ctx, fmt.Sprintf("ConfigMap %s/%s in %s to be stamped", namespace, name, member), func() (bool, error) {
		seen, err := d.seenIn(ctx, member, name)
		if err != nil {
			return false, err
		}
		if seen != "" && seen != member {
			return false, fmt.Errorf("ConfigMap %s/%s in %s was stamped %q", namespace, name, member, seen)
		}
		return seen == member, nil
	})
}

// interrupted turns an error caused by Ctrl-C into errInterrupted.
func (d *demo) interrupted(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errInterrupted
	}
	return err
}

// dropKubeconfig puts a member's kubeconfig into the watched directory the
// way a careful tool does: written under a hidden name (the watcher skips
// those), then renamed, so it is never read half-written.
func (d *demo) dropKubeconfig(member string) error {
	data, err := os.ReadFile(d.fleet.Cluster(member).KubeconfigPath)
	if err != nil {
		return err
	}
	tmp := filepath.Join(d.watched, "."+member+".kubeconfig.tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(d.watched, member+".kubeconfig"))
}

func openLog(path string) (io.Writer, func(), error) {
	if path == "" {
		return io.Discard, func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { _ = f.Close() }, nil
}

// killLeftovers kills every kube-apiserver and etcd whose command line
// mentions dir, and says how many there were. The API servers and etcds of the fleet keep
// their certificates and data under dir, so after a clean stop there are
// none.
func killLeftovers(dir string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(raw), dir) {
			continue
		}
		// Only the fleet's own programs: a kubectl pointed at one of its
		// kubeconfigs mentions dir too, and is none of the demo's business.
		argv0, _, _ := strings.Cut(string(raw), "\x00")
		if b := filepath.Base(argv0); b != "kube-apiserver" && b != "etcd" {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			pids = append(pids, pid)
		}
	}
	// Reap those that are our children; others are reaped by their parent.
	for _, pid := range pids {
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err != nil && !errors.Is(err, syscall.ECHILD) {
			continue
		}
	}
	return len(pids)
}
