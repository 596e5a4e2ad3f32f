package server_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/fakeapi"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// TestOneConnectionPerMember: a member reaches its API server over one
// HTTP/2 connection, which its start's check, its reachability probes,
// its watches and its REST mapper share, whatever its config: a plain
// token, an exec plugin, a transport wrapper of its own. A config with an
// exec plugin dials through a tracker of its own, and client-go builds a
// new transport for each client made from such a config: the member held
// three connections. The other two share the connection pool's transport.
// Once every connection is cut, the member comes back over one again.
func TestOneConnectionPerMember(t *testing.T) {
	host := fakeapi.New()
	host.Start()
	t.Cleanup(host.Close)
	srv, err := server.NewServer(host.Config(), ctrl.Options{
		Logger:                 logr.Discard(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	}, func(o *server.Options) { o.ReachProbeInterval = 50 * time.Millisecond })
	if err != nil {
		t.Fatal(err)
	}
	srv.AddReconcilerSetup(configMapController("cms"))
	test.Run(t, srv)

	for _, tc := range []struct {
		name string
		cred func(t *testing.T, cfg *rest.Config)
	}{
		{"token", func(*testing.T, *rest.Config) {}},
		{"exec", func(t *testing.T, cfg *rest.Config) {
			p := newExecPlugin(t)
			p.hand(t, cfg.BearerToken)
			cfg.BearerToken = ""
			p.set(cfg)
		}},
		{"wrapped", func(_ *testing.T, cfg *rest.Config) {
			cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return rt })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fakeapi.New(fakeapi.WithHTTP2())
			f.Seed(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "x"}})
			f.Start()
			t.Cleanup(f.Close)
			proxy := test.NewFaultProxy(t, f.Config())
			cfg := proxy.Config()
			tc.cred(t, cfg)
			name := "conns-" + tc.name
			if err := srv.Add(config.NewNamedConfig(name, cfg)); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Delete(name) })
			waitProbed(t, srv, name)
			if st := proxy.Stats(); st.Accepted != 1 || st.Open != 1 {
				t.Errorf("%d connections made to the member's API server, %d open; want 1 and 1", st.Accepted, st.Open)
			}

			proxy.Cut()
			test.Eventually(t, 10*time.Second, "the member back over one connection", func() bool {
				return proxy.Stats().Open == 1
			})
			waitProbed(t, srv, name)
			if n := proxy.Stats().Open; n != 1 {
				t.Errorf("after a cut: %d connections open to the member's API server, want 1", n)
			}
		})
	}
}

// waitProbed waits for name to be Ready and probed since (the probe's
// client has had its say).
func waitProbed(t *testing.T, srv *server.Server, name string) {
	t.Helper()
	waitPhase(t, srv, name, server.PhaseReady)
	ready := time.Now()
	test.Eventually(t, 10*time.Second, name+" probed after Ready", func() bool {
		st, err := srv.Status(name)
		return err == nil && st.Phase == server.PhaseReady && st.Reachable && st.LastProbe.After(ready.Add(100*time.Millisecond))
	})
}
