package server_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// candidate is one of several Servers electing a leader on the same Lease,
// each reaching the host through a fault proxy of its own (so that a test
// can cut one off), each with its own record of first reconciles.
type candidate struct {
	id     string
	srv    *server.Server
	proxy  *test.FaultProxy
	first  *test.FirstReconcile
	cancel context.CancelFunc
	done   chan struct{}

	// Set before done closes.
	err      error
	statuses []server.ClusterStatus
}

type candidateOptions struct {
	ns, lease string
	clusters  []*config.NamedConfig
	cold      bool
	log       logr.Logger
	// owners, when set, records each replica's ownership of its members.
	owners *test.OwnershipRecorder
}

func startCandidate(tb testing.TB, id string, o candidateOptions) *candidate {
	tb.Helper()
	proxy := test.NewFaultProxy(tb, fleet.Cluster("host").Config)
	var opts []server.Option
	if o.cold {
		opts = append(opts, func(so *server.Options) { so.ColdStandby = true })
	}
	srv, err := server.NewServer(proxy.Config(), ctrl.Options{
		Logger:                        o.log.WithValues("server", id),
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		Cache:                         cache.Options{DefaultNamespaces: map[string]cache.Config{o.ns: {}}},
		LeaderElection:                true,
		LeaderElectionID:              o.lease,
		LeaderElectionNamespace:       "default",
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 ptr.To(4 * time.Second),
		RenewDeadline:                 ptr.To(3 * time.Second),
		RetryPeriod:                   ptr.To(200 * time.Millisecond),
		GracefulShutdownTimeout:       ptr.To(5 * time.Second),
	}, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	first := &test.FirstReconcile{}
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("failover-" + o.ns).For(&corev1.ConfigMap{}).Complete(first)
	})
	if o.owners != nil {
		srv.AddReconcilerSetup(o.owners.Setup(id))
	}
	for _, nc := range o.clusters {
		if err := srv.Add(nc); err != nil {
			tb.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &candidate{id: id, srv: srv, proxy: proxy, first: first, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		err := srv.Start(ctx)
		r.statuses = srv.Statuses()
		r.err = err
	}()
	tb.Cleanup(func() {
		cancel()
		_ = proxy.Pass() // a frozen replica must be able to stop
		select {
		case <-r.done:
		case <-time.After(time.Minute):
			tb.Errorf("server %s: Start did not return within a minute of its ctx ending", id)
		}
	})
	return r
}

func (r *candidate) elected() bool {
	select {
	case <-r.srv.Elected():
		return true
	default:
		return false
	}
}

// reconciled counts the clusters the replica has reconciled in.
func (r *candidate) reconciled(clusters []*config.NamedConfig) int {
	n := 0
	for _, nc := range clusters {
		select {
		case <-r.first.Seen(nc.Name):
			n++
		default:
		}
	}
	return n
}

func allReady(srv *server.Server, clusters []*config.NamedConfig) bool {
	for _, nc := range clusters {
		if st, err := srv.Status(nc.Name); err != nil || st.Phase != server.PhaseReady {
			return false
		}
	}
	return true
}

// failoverFleet gives n cluster names an endpoint each (a port of their
// own, in front of the package's member API servers), with one ConfigMap
// "tick" in ns behind every one of them.
func failoverFleet(tb testing.TB, ns string, n int) []*config.NamedConfig {
	tb.Helper()
	backends := make([]*test.Cluster, 0, len(members))
	for _, m := range members {
		backends = append(backends, fleet.Cluster(m))
		createConfigMap(tb, m, ns, "tick")
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%03d", ns, i)
	}
	eps := test.NewEndpoints(tb, fleet, backends, names...)
	out := make([]*config.NamedConfig, len(eps))
	for i, e := range eps {
		out[i] = e.Named
	}
	return out
}

// failover is what one leader change cost: from the leader's loss to the
// new leader's election, and on to its first reconcile in every cluster.
type failover struct {
	toElected, toAllReconciled time.Duration
}

// killLeader ends the leader's leadership (hard: its host connection
// freezes, so it loses its Lease by failing to renew; otherwise its ctx is
// cancelled and it releases the Lease) and times the standby's takeover.
func killLeader(tb testing.TB, leader, standby *candidate, clusters []*config.NamedConfig, hard bool) failover {
	tb.Helper()
	killed := time.Now()
	if hard {
		if err := leader.proxy.Freeze(); err != nil {
			tb.Fatal(err)
		}
	} else {
		leader.cancel()
	}
	var f failover
	deadline := killed.Add(60 * time.Second)
	for f.toAllReconciled == 0 {
		if time.Now().After(deadline) {
			tb.Fatalf("60s after the leader's loss, the new leader (elected: %v) has reconciled in %d of %d clusters",
				standby.elected(), standby.reconciled(clusters), len(clusters))
		}
		if f.toElected == 0 && standby.elected() {
			f.toElected = time.Since(killed)
		}
		if f.toElected != 0 && standby.reconciled(clusters) == len(clusters) {
			f.toAllReconciled = time.Since(killed)
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case <-leader.done:
	case <-time.After(30 * time.Second):
		tb.Fatalf("the old leader's Start did not return within 30s of losing its leadership")
	}
	return f
}

// pair starts two replicas on one Lease and waits until one leads and has
// reconciled in every cluster. It returns the leader first.
func pair(tb testing.TB, o candidateOptions) (leader, standby *candidate) {
	tb.Helper()
	a := startCandidate(tb, "a", o)
	b := startCandidate(tb, "b", o)
	test.Eventually(tb, 60*time.Second, "one replica elected", func() bool { return a.elected() || b.elected() })
	leader, standby = a, b
	if b.elected() {
		leader, standby = b, a
	}
	test.Eventually(tb, 60*time.Second, "the leader reconciles in every cluster", func() bool {
		return leader.reconciled(o.clusters) == len(o.clusters)
	})
	return leader, standby
}

// TestStandbyServesReadsAndTakesOverWarm: with leader election, a replica
// that does not lead runs every member's caches, as controller-runtime
// runs its caches on a standby: the fan-out client's Get and fleet-wide
// List work on it while none of its member reconcilers has run. When the
// leader goes (its ctx cancelled, or cut off from the host so that it
// loses its Lease), the standby is elected and reconciles in every
// cluster from warm caches. With Options.ColdStandby, the standby keeps
// its members Pending (reads are ErrClusterNotReady) and starts them all
// once it leads, as before.
func TestStandbyServesReadsAndTakesOverWarm(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cold, hard bool
	}{
		{name: "warm/cancel"},
		{name: "warm/hard", hard: true},
		{name: "cold/cancel", cold: true},
		{name: "cold/hard", cold: true, hard: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := testNamespace(t)
			clusters := failoverFleet(t, ns, 20)
			ignore := goleak.IgnoreCurrent()
			owners := &test.OwnershipRecorder{}
			o := candidateOptions{ns: ns, lease: "mccr-standby-" + ns, clusters: clusters, cold: tc.cold, log: test.Logger(t), owners: owners}
			leader, standby := pair(t, o)

			if tc.cold {
				for _, nc := range clusters {
					if st, _ := standby.srv.Status(nc.Name); st.Phase != server.PhasePending {
						t.Fatalf("cold standby's %s is %s, want Pending", nc.Name, st.Phase)
					}
				}
				ctx := known.WithCluster(context.Background(), clusters[0].Name)
				err := standby.srv.GetClient().Get(ctx, client.ObjectKey{Namespace: ns, Name: "tick"}, &corev1.ConfigMap{})
				if !errors.Is(err, server.ErrClusterNotReady) {
					t.Fatalf("cold standby's Get = %v, want ErrClusterNotReady", err)
				}
				// Ready as it will be until it leads: a rollout waiting
				// for the new replica to be ready goes on.
				if err := standby.srv.FleetReadyCheck(1)(nil); err != nil {
					t.Errorf("cold standby's FleetReadyCheck(1): %v; want it passing", err)
				}
			} else {
				test.Eventually(t, 60*time.Second, "every member Ready on the standby", func() bool { return allReady(standby.srv, clusters) })
				if err := standby.srv.FleetReadyCheck(len(clusters))(nil); err != nil {
					t.Errorf("warm standby's FleetReadyCheck(%d) with every member Ready: %v", len(clusters), err)
				}
				for _, nc := range clusters {
					var cm corev1.ConfigMap
					ctx := known.WithCluster(context.Background(), nc.Name)
					if err := standby.srv.GetClient().Get(ctx, client.ObjectKey{Namespace: ns, Name: "tick"}, &cm); err != nil {
						t.Fatalf("standby's Get in %s: %v", nc.Name, err)
					}
				}
				var list corev1.ConfigMapList
				if err := standby.srv.GetClient().List(context.Background(), &list, client.InNamespace(ns)); err != nil {
					t.Fatalf("standby's fleet-wide List: %v", err)
				}
				seen := map[string]bool{}
				for _, cm := range list.Items {
					if cm.Name == "tick" {
						seen[cm.Annotations[known.ClusterAnnotation]] = true
					}
				}
				if len(seen) != len(clusters) {
					t.Fatalf("standby's fleet-wide List found tick in %d of %d clusters", len(seen), len(clusters))
				}
			}
			if n := standby.reconciled(clusters); n != 0 {
				t.Fatalf("the standby reconciled in %d clusters while the other replica led", n)
			}
			// The ownership recorder agrees: the leader owns every
			// cluster, the standby (its members running or not) none.
			for _, nc := range clusters {
				if got := owners.Owners(nc.Name); !slices.Equal(got, []string{leader.id}) {
					t.Errorf("%s owned by %v while %s led; want the leader alone", nc.Name, got, leader.id)
				}
			}

			f := killLeader(t, leader, standby, clusters, tc.hard)
			t.Logf("%s, %d clusters: leader lost → standby elected %s, → every cluster reconciled %s (%s after the election)",
				tc.name, len(clusters), f.toElected.Round(time.Millisecond), f.toAllReconciled.Round(time.Millisecond),
				(f.toAllReconciled - f.toElected).Round(time.Millisecond))
			if tc.hard && (leader.err == nil || !strings.Contains(leader.err.Error(), "leader election lost")) {
				t.Errorf("the cut-off leader's Start returned %v, want leader election lost", leader.err)
			}
			if !tc.hard && leader.err != nil {
				t.Errorf("the cancelled leader's Start returned %v", leader.err)
			}
			for _, st := range leader.statuses {
				if st.Phase != server.PhaseStopped {
					t.Errorf("the old leader's %s was %s when its Start returned, want Stopped", st.Name, st.Phase)
				}
			}

			// Once both have stopped, nothing of either is left running.
			standby.cancel()
			<-standby.done
			if standby.err != nil {
				t.Errorf("the new leader's Start returned %v", standby.err)
			}
			for _, c := range []*candidate{leader, standby} {
				if err := c.proxy.Close(); err != nil {
					t.Error(err)
				}
			}
			fleet.CloseConnections()
			leakcheck.VerifyNone(t, ignore)
		})
	}
}

// BenchmarkFailover measures a leader change with 100 clusters, each
// behind an endpoint of its own: from the leader's loss (its ctx cancelled,
// so it releases the Lease; or, hard, its host connection frozen, so it
// fails to renew) to the standby's election, and to the standby's first
// reconcile in every cluster. cold is Options.ColdStandby (the standby
// starts every member when elected); warm is the default (the standby's
// members have synced their caches before). Run it with
//
//	go test -run '^$' -bench BenchmarkFailover -benchtime 3x ./server/
func BenchmarkFailover(b *testing.B) {
	const clusters = 100
	for _, cold := range []bool{true, false} {
		for _, hard := range []bool{false, true} {
			name := fmt.Sprintf("standby=%s/kill=%s", map[bool]string{true: "cold", false: "warm"}[cold], map[bool]string{true: "hard", false: "cancel"}[hard])
			b.Run(name, func(b *testing.B) {
				ns := testNamespace(b)
				ncs := failoverFleet(b, ns, clusters)
				var elected, all, afterElection time.Duration
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					o := candidateOptions{ns: ns, lease: fmt.Sprintf("mccr-failover-%s-%d", ns, i), clusters: ncs, cold: cold, log: logr.Discard()}
					leader, standby := pair(b, o)
					if !cold {
						test.Eventually(b, 2*time.Minute, "every member Ready on the standby", func() bool { return allReady(standby.srv, ncs) })
					}
					b.StartTimer()
					f := killLeader(b, leader, standby, ncs, hard)
					b.StopTimer()
					elected += f.toElected
					all += f.toAllReconciled
					afterElection += f.toAllReconciled - f.toElected
					standby.cancel()
					<-standby.done
					b.StartTimer()
				}
				n := float64(b.N)
				b.ReportMetric(elected.Seconds()/n, "s-to-elected")
				b.ReportMetric(all.Seconds()/n, "s-to-all-reconciled")
				b.ReportMetric(float64(afterElection.Milliseconds())/n, "ms-elected-to-all-reconciled")
			})
		}
	}
}
