package server_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

func TestUnchangedReconcilerRunsInEveryCluster(t *testing.T) {
	ns := testNamespace(t)
	r := startServer(t, ns, nil)
	three := members[:3]
	addReady(t, r.srv, three...)
	for _, name := range three {
		createConfigMap(t, name, ns, "from-"+name)
	}
	for _, name := range three {
		test.Eventually(t, 10*time.Second, "ack in "+name, func() bool { return ackIn(t, name, ns, "from-"+name) == name })
	}
	// Each write landed in its own cluster only.
	for _, name := range three {
		for _, other := range three {
			if other != name && ackIn(t, other, ns, "from-"+name) != "" {
				t.Errorf("ack for %s's object found in %s", name, other)
			}
		}
		if r.rec.count(name, "from-"+name) == 0 {
			t.Errorf("no reconcile of from-%s recorded in %s", name, name)
		}
		for _, other := range three {
			if other != name && r.rec.count(other, "from-"+name) != 0 {
				t.Errorf("%s reconciled %s's object", other, name)
			}
		}
	}
	if len(r.rec.bad) > 0 {
		t.Errorf("contexts without their cluster: %v", r.rec.bad)
	}
}

func TestAddDeleteReAddAndUpdateWhileRunning(t *testing.T) {
	ns := testNamespace(t)
	r := startServer(t, ns, nil)
	addReady(t, r.srv, members[:3]...)
	// The test's own connection to m4 exists before the baseline is taken.
	createConfigMap(t, "m4", ns, "first")
	baseline := settledGoroutines()

	// Add a fourth cluster while running.
	m4 := fleet.Cluster("m4")
	if err := r.srv.Add(m4.Named); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 15*time.Second, "m4 reconciles", func() bool { return ackIn(t, "m4", ns, "first") == "m4" })

	// Same config again: no-op. Different config under a known name: refused.
	if err := r.srv.Add(m4.Named); err != nil {
		t.Fatalf("re-Add of identical config: %v", err)
	}
	changed := config.NewNamedConfig("m4", rest.CopyConfig(m4.Config))
	changed.Config.UserAgent = "changed"
	if err := r.srv.Add(changed); !errors.Is(err, server.ErrClusterExists) {
		t.Fatalf("Add of changed config = %v, want ErrClusterExists", err)
	}

	// Delete: returns once stopped; no more reconciles there.
	if err := r.srv.Delete("m4"); err != nil {
		t.Fatal(err)
	}
	if err := r.srv.Delete("m4"); !errors.Is(err, server.ErrClusterNotFound) {
		t.Fatalf("second Delete = %v, want ErrClusterNotFound", err)
	}
	before := r.rec.total("m4")
	createConfigMap(t, "m4", ns, "after-delete")
	ctx := known.WithCluster(context.Background(), "m4")
	if err := r.srv.GetClient().Get(ctx, client.ObjectKey{Namespace: ns, Name: "first"}, &corev1ConfigMap{}); !errors.Is(err, server.ErrClusterNotFound) {
		t.Errorf("fan-out Get in deleted cluster = %v, want ErrClusterNotFound", err)
	}
	waitGoroutines(t, baseline)
	if n := r.rec.total("m4"); n != before {
		t.Errorf("%d reconciles in m4 after Delete", n-before)
	}

	// Re-Add the same name: works (no duplicate controller name error).
	if err := r.srv.Add(m4.Named); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 15*time.Second, "m4 reconciles after re-Add", func() bool { return ackIn(t, "m4", ns, "after-delete") == "m4" })

	// Update m4 with new credentials: only m4 restarts.
	others := map[string]server.ClusterStatus{}
	for _, n := range members[:3] {
		others[n], _ = r.srv.Status(n)
	}
	user, err := m4.Env.AddUser(envtestUser("rotated"), nil)
	if err != nil {
		t.Fatal(err)
	}
	rotated := config.NewNamedConfig("m4", user.Config())
	if err := r.srv.Update(rotated); err != nil {
		t.Fatal(err)
	}
	if err := r.srv.Update(rotated); err != nil {
		t.Fatalf("identical Update: %v", err)
	}
	waitReady(t, r.srv, "m4")
	createConfigMap(t, "m4", ns, "after-update")
	test.Eventually(t, 15*time.Second, "m4 reconciles after Update", func() bool { return ackIn(t, "m4", ns, "after-update") == "m4" })
	for _, n := range members[:3] {
		now, _ := r.srv.Status(n)
		if now.Phase != server.PhaseReady || !now.Since.Equal(others[n].Since) || now.Restarts != others[n].Restarts {
			t.Errorf("%s changed by m4's Update: before %+v, after %+v", n, others[n], now)
		}
	}
	if err := r.srv.Update(config.NewNamedConfig("nope", m4.Config)); !errors.Is(err, server.ErrClusterNotFound) {
		t.Errorf("Update of unknown cluster = %v", err)
	}
}

func TestUnreachableMemberIsolatedAndRecovers(t *testing.T) {
	ns := testNamespace(t)
	r := startServer(t, ns, nil, func(o *server.Options) {
		o.Backoff.Duration = 200 * time.Millisecond
		o.Backoff.Cap = time.Second
	})
	addReady(t, r.srv, members[:2]...)

	m4 := fleet.Cluster("m4")
	if err := m4.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = m4.StartAPIServer(context.Background())
		}
	})
	begin := time.Now()
	if err := r.srv.Add(m4.Named); err != nil {
		t.Fatal(err)
	}
	// Add does not wait on the network: it returns long before a dial
	// to the stopped server could time out (30s), however loaded the
	// machine.
	if took := time.Since(begin); took > 2*time.Second {
		t.Errorf("Add of an unreachable cluster took %s", took)
	}
	test.Eventually(t, 10*time.Second, "m4 Failed", func() bool {
		st, _ := r.srv.Status("m4")
		return st.Phase == server.PhaseFailed && st.LastError != nil && !st.NextRetry.IsZero()
	})
	st, _ := r.srv.Status("m4")
	if _, ok := errors.AsType[*net.OpError](st.LastError); !ok {
		t.Logf("m4 LastError: %v", st.LastError)
	}
	// The others keep reconciling meanwhile.
	for _, name := range members[:2] {
		createConfigMap(t, name, ns, "while-m4-down")
		test.Eventually(t, 10*time.Second, name+" reconciles", func() bool { return ackIn(t, name, ns, "while-m4-down") == name })
	}
	// The API server comes up on that address: m4 becomes Ready by itself.
	if err := m4.StartAPIServer(context.Background()); err != nil {
		t.Fatal(err)
	}
	restarted = true
	waitReady(t, r.srv, "m4")
	createConfigMap(t, "m4", ns, "m4-back")
	test.Eventually(t, 10*time.Second, "m4 reconciles", func() bool { return ackIn(t, "m4", ns, "m4-back") == "m4" })
}

func TestKilledMemberAPIServerRecovers(t *testing.T) {
	ns := testNamespace(t)
	r := startServer(t, ns, nil)
	addReady(t, r.srv, members[:3]...)
	m3 := fleet.Cluster("m3")
	if err := m3.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	for _, name := range members[:2] {
		createConfigMap(t, name, ns, "during-outage")
		test.Eventually(t, 10*time.Second, name+" reconciles during m3's outage", func() bool { return ackIn(t, name, ns, "during-outage") == name })
	}
	if err := m3.StartAPIServer(context.Background()); err != nil {
		t.Fatal(err)
	}
	createConfigMap(t, "m3", ns, "after-outage")
	test.Eventually(t, 45*time.Second, "m3 reconciles after its API server returns", func() bool { return ackIn(t, "m3", ns, "after-outage") == "m3" })
}

// TestClientGoInformersOption: members built with client-go's informers
// (Options.ClientGoInformers) run the same reconciler the same way.
func TestClientGoInformersOption(t *testing.T) {
	ns := testNamespace(t)
	r := startServer(t, ns, nil, func(o *server.Options) { o.ClientGoInformers = true })
	two := members[:2]
	addReady(t, r.srv, two...)
	for _, name := range two {
		createConfigMap(t, name, ns, "client-go-"+name)
	}
	for _, name := range two {
		test.Eventually(t, 10*time.Second, "ack in "+name, func() bool { return ackIn(t, name, ns, "client-go-"+name) == name })
	}
}
