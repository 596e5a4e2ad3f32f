package configwatcher_test

import (
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	kubefedv1beta1 "github.com/mccr-dev/mccr/apis/kubefed/v1beta1"
	"github.com/mccr-dev/mccr/configwatcher"
	mccrserver "github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// forwarder is a loopback TCP forwarder in front of an API server that
// counts the connections open through it.
type forwarder struct {
	ln   net.Listener
	mu   sync.Mutex
	open map[net.Conn]bool
	wg   sync.WaitGroup
}

func newForwarder(t *testing.T, target string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln, open: map[net.Conn]bool{}}
	f.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.wg.Go(func() { f.pipe(c, target) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		f.mu.Lock()
		for c := range f.open {
			_ = c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *forwarder) pipe(c net.Conn, target string) {
	up, err := net.Dial("tcp", target)
	if err != nil {
		_ = c.Close()
		return
	}
	f.mu.Lock()
	f.open[c] = true
	f.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done // either side closed: close both
	_ = c.Close()
	_ = up.Close()
	<-done
	f.mu.Lock()
	delete(f.open, c)
	f.mu.Unlock()
}

func (f *forwarder) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.open)
}

// settles waits until the forwarder holds want connections, and returns
// how many it holds at the end.
func (f *forwarder) settles(want int, within time.Duration) int {
	deadline := time.Now().Add(within)
	for f.count() != want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	return f.count()
}

// A member joined with relaxed TLS (disabledTLSValidations) keeps no
// connection open once it is deleted (unjoined), nor once the Server's
// Start has returned: its connections go through the same tracking as
// every other member's. The member's API server sits behind a forwarder
// that counts the connections to it.
func (e *kubeFedEnv) testRelaxedTLSThroughServer(t *testing.T) {
	const ns = "kf-relaxed"
	e.namespace(t, e.hostClient, ns)
	u, err := url.Parse(e.member.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	fwd := newForwarder(t, u.Host)

	join := func(name string) func() {
		secret := tokenSecret(ns, name+"-token", e.memberToken)
		kfc := e.kubeFedCluster(ns, name, secret.Name)
		kfc.Spec.APIEndpoint = "https://" + fwd.ln.Addr().String()
		kfc.Spec.DisabledTLSValidations = []kubefedv1beta1.TLSValidation{kubefedv1beta1.TLSSubjectName}
		create(t, e.hostClient, secret, kfc)
		return func() { remove(t, e.hostClient, secret, kfc) }
	}
	ready := func(srv *mccrserver.Server, name string) {
		test.Eventually(t, kfPatience, name+" Ready", func() bool {
			st, err := srv.Status(name)
			return err == nil && st.Phase == mccrserver.PhaseReady
		})
	}
	newServer := func() *mccrserver.Server {
		w, err := configwatcher.NewKubeFedWatcher(e.host.Config, configwatcher.WithKubeFedNamespace(ns), configwatcher.WithLogger(testr.New(t)))
		if err != nil {
			t.Fatal(err)
		}
		return newWatchingServer(t, e.host.Config, testr.New(t), w)
	}

	// Deleted: the unjoin removes the member.
	srv := newServer()
	stop := test.Run(t, srv)
	unjoin := join("relaxed")
	ready(srv, "relaxed")
	running := fwd.count()
	if running == 0 {
		t.Fatal("no connection to the member while it is Ready")
	}
	unjoin()
	test.Eventually(t, kfPatience, "relaxed deleted", func() bool {
		_, err := srv.Status("relaxed")
		return errors.Is(err, mccrserver.ErrClusterNotFound)
	})
	afterDelete := fwd.settles(0, 5*time.Second)
	t.Logf("figure: relaxed-TLS member connections: %d while Ready, %d after Delete", running, afterDelete)
	if afterDelete != 0 {
		t.Fatalf("%d connection(s) to a deleted member still open", afterDelete)
	}

	// Start returns: the Server stops with the member still joined.
	unjoin = join("relaxed-again")
	defer unjoin()
	ready(srv, "relaxed-again")
	running = fwd.count()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	afterStop := fwd.settles(0, 5*time.Second)
	t.Logf("figure: relaxed-TLS member connections: %d while Ready, %d after Start returned", running, afterStop)
	if afterStop != 0 {
		t.Fatalf("%d connection(s) to the member still open after Start returned", afterStop)
	}
}
