package server_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// rateServer starts a Server with these options and adds each config,
// waiting until they are Ready.
func rateServer(t *testing.T, set func(*server.Options), cfgs ...*config.NamedConfig) *server.Server {
	t.Helper()
	var opts []server.Option
	if set != nil {
		opts = append(opts, set)
	}
	srv, err := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{
		Logger:                 test.Logger(t),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	test.Run(t, srv)
	for _, nc := range cfgs {
		if err := srv.Add(nc); err != nil {
			t.Fatal(err)
		}
		waitReady(t, srv, nc.Name)
	}
	return srv
}

// memberConfig is the config the member's clients are built from.
func memberConfig(t *testing.T, srv *server.Server, name string) *rest.Config {
	t.Helper()
	mgr, err := srv.GetManager(name)
	if err != nil {
		t.Fatal(err)
	}
	return mgr.GetConfig()
}

// kubeconfigLoaded is the fleet's m1 as loaded from its kubeconfig file,
// renamed: no QPS (client-go's 5 per second) and no Burst.
func kubeconfigLoaded(t *testing.T, name string) *config.NamedConfig {
	t.Helper()
	ncs, err := config.LoadConfigsFromConfigFile(fleet.Cluster("m1").KubeconfigPath)
	if err != nil || len(ncs) != 1 {
		t.Fatalf("loading m1's kubeconfig: %d configs, %v", len(ncs), err)
	}
	cfg := ncs[0].Config
	if cfg.QPS != 0 || cfg.Burst != 0 || cfg.RateLimiter != nil {
		t.Fatalf("the kubeconfig sets a rate limit (QPS %v, burst %d); this test needs one that does not", cfg.QPS, cfg.Burst)
	}
	return config.NewNamedConfig(name, cfg)
}

// createMany creates n ConfigMaps one after another through the fan-out
// client, within a deadline that client-go's default limit (5 per second,
// burst 10: n=200 takes 38 s) cannot meet; its limiter fails a wait that
// would pass the deadline at once.
func createMany(t *testing.T, srv *server.Server, cluster, ns, prefix string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(known.WithCluster(context.Background(), cluster), 30*time.Second)
	defer cancel()
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%03d", prefix, i), Namespace: ns}}
		if err := srv.GetClient().Create(ctx, cm); err != nil {
			t.Fatalf("create %d of %d in %s: %v", i+1, n, cluster, err)
		}
	}
}

// TestMemberClientsUnthrottled: a member whose config sets no rate limit
// (a kubeconfig's) gets none, as with controller-runtime's ctrl.GetConfig:
// 200 sequential Creates through the fan-out client are not held back
// by client-go's default 5 per second.
func TestMemberClientsUnthrottled(t *testing.T) {
	ns := testNamespace(t)
	nc := kubeconfigLoaded(t, "plain")
	srv := rateServer(t, nil, nc)
	cfg := memberConfig(t, srv, "plain")
	if cfg.QPS >= 0 || cfg.RateLimiter != nil {
		t.Fatalf("member config: QPS %v, RateLimiter %v; want no client-side limit (QPS < 0, no RateLimiter)", cfg.QPS, cfg.RateLimiter)
	}
	if nc.Config.QPS != 0 {
		t.Errorf("the caller's config was changed: QPS %v", nc.Config.QPS)
	}
	createMany(t, srv, "plain", ns, "unthrottled", 200)
}

// countingLimiter lets every request through and counts them.
type countingLimiter struct {
	flowcontrol.RateLimiter
	waits atomic.Int64
}

func (l *countingLimiter) Wait(ctx context.Context) error {
	l.waits.Add(1)
	return ctx.Err()
}

// TestMemberRateLimitSettings: the Server's MemberQPS/MemberBurst apply to
// members whose config sets no limit; a config's own QPS and Burst, or its
// own RateLimiter, win; changing a member's QPS is an Update that restarts
// it with the new limit.
func TestMemberRateLimitSettings(t *testing.T) {
	ns := testNamespace(t)
	own := kubeconfigLoaded(t, "own")
	own.Config.QPS, own.Config.Burst = 50, 70
	limiter := &countingLimiter{RateLimiter: flowcontrol.NewFakeAlwaysRateLimiter()}
	custom := kubeconfigLoaded(t, "custom")
	custom.Config.RateLimiter = limiter
	burstOnly := kubeconfigLoaded(t, "burst-only")
	burstOnly.Config.Burst = 300
	srv := rateServer(t, func(o *server.Options) { o.MemberQPS, o.MemberBurst = 200, 400 },
		kubeconfigLoaded(t, "default"), own, custom, burstOnly)

	for _, c := range []struct {
		name  string
		qps   float32
		burst int
	}{{"default", 200, 400}, {"own", 50, 70}, {"burst-only", 200, 300}} {
		cfg := memberConfig(t, srv, c.name)
		if cfg.QPS != c.qps || cfg.Burst != c.burst || cfg.RateLimiter != nil {
			t.Errorf("%s: QPS %v, burst %d, RateLimiter %v; want QPS %v, burst %d, none", c.name, cfg.QPS, cfg.Burst, cfg.RateLimiter, c.qps, c.burst)
		}
	}

	// The member's clients ask the config's own limiter for every request.
	before := limiter.waits.Load()
	createMany(t, srv, "custom", ns, "custom", 20)
	if got := limiter.waits.Load() - before; got < 20 {
		t.Errorf("the config's RateLimiter was asked %d times for 20 Creates", got)
	}

	// A changed QPS is a change: the member restarts with it.
	mgr, err := srv.GetManager("own")
	if err != nil {
		t.Fatal(err)
	}
	changed := kubeconfigLoaded(t, "own")
	changed.Config.QPS, changed.Config.Burst = 80, 70
	if err := srv.Update(changed); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, time.Minute, "own restarted with QPS 80", func() bool {
		st, err := srv.Status("own")
		if err != nil || st.Phase != server.PhaseReady {
			return false
		}
		m, err := srv.GetManager("own")
		return err == nil && m != mgr && m.GetConfig().QPS == 80
	})
}
