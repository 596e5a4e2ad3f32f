package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/rest"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	mcclient "github.com/mccr-dev/mccr/client"
	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/slowanswer"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// These tests run the whole path on the fleet's API servers: a Server's
// fan-out client, the member's Manager and transport, the Server's Delete
// and Update. Members reach cluster c1 through a transport whose answers
// to writes the test holds back (slowanswer), so that a write is applied
// by a real API server and its answer is still to come when the member
// goes away.

// memberShutdown is the members' graceful shutdown timeout in these
// tests, and so the grace of their writes (never longer than it): a write
// unanswered when its member stops is cut that long after, well before the
// fan-out client's own grace (DefaultWriteGrace) would.
const memberShutdown = 2 * time.Second

// outcomeServer starts a Server of the test's own, caching only ns, whose
// members stop within memberShutdown.
func outcomeServer(t *testing.T, ns string) *server.Server {
	t.Helper()
	opts := serverOptions(testr.NewWithInterface(t, testr.Options{Verbosity: 0}), ns)
	shutdown := memberShutdown
	opts.GracefulShutdownTimeout = &shutdown
	srv, err := server.NewServer(fleet.Cluster("host").Config, opts, func(o *server.Options) { o.StopTimeout = 30 * time.Second })
	if err != nil {
		t.Fatal(err)
	}
	test.Run(t, srv)
	return srv
}

// heldNamed is a NamedConfig called name that reaches c1 with the answers
// to its writes held by slow. A different userAgent makes it a different
// config: an Update with it restarts the member.
func heldNamed(name string, slow *slowanswer.Holder, userAgent string) *config.NamedConfig {
	cfg := rest.CopyConfig(fleet.Cluster("c1").Config)
	cfg.WrapTransport = slow.Wrap
	cfg.UserAgent = userAgent
	return config.NewNamedConfig(name, cfg)
}

// routeGone returns a condition that holds once calls aimed at name no
// longer reach the Manager they reach now: its route ended (the cluster is
// gone, not Ready, or runs another Manager already).
func routeGone(t *testing.T, c *mcclient.Client, name string) func() bool {
	t.Helper()
	now, err := c.For(in(name))
	if err != nil {
		t.Fatalf("%s has no route: %v", name, err)
	}
	return func() bool {
		cl, err := c.For(in(name))
		return err != nil || cl != now
	}
}

// leaving ends a member's route while a write waits: by Delete, or by an
// Update that restarts it.
type leaving struct {
	how   string
	leave func(srv *server.Server, name string, slow *slowanswer.Holder) error
	// back makes the member routable again (after a Delete: add it).
	back func(t *testing.T, srv *server.Server, name string, slow *slowanswer.Holder)
}

var leaveByDelete = leaving{
	how:   "Delete",
	leave: func(srv *server.Server, name string, _ *slowanswer.Holder) error { return srv.Delete(name) },
	back: func(t *testing.T, srv *server.Server, name string, slow *slowanswer.Holder) {
		t.Helper()
		if err := srv.Add(heldNamed(name, slow, "mccr-test/readded-"+time.Now().Format(time.RFC3339Nano))); err != nil {
			t.Fatal(err)
		}
	},
}

var leaveByUpdate = leaving{
	how: "Update",
	leave: func(srv *server.Server, name string, slow *slowanswer.Holder) error {
		return srv.Update(heldNamed(name, slow, "mccr-test/rotated-"+time.Now().Format(time.RFC3339Nano)))
	},
	back: func(*testing.T, *server.Server, string, *slowanswer.Holder) {},
}

// outcome names what a write returned, for the figures.
func outcome(err error) string {
	switch {
	case err == nil:
		return "success"
	case errors.Is(err, mcclient.ErrOutcomeUnknown):
		return "ErrOutcomeUnknown"
	case errors.Is(err, mcclient.ErrClusterNotFound):
		return "ErrClusterNotFound"
	case errors.Is(err, mcclient.ErrClusterNotReady):
		return "ErrClusterNotReady"
	case apierrors.IsAlreadyExists(err):
		return "AlreadyExists"
	}
	return "other: " + err.Error()
}

// inFlightCase is one write made while its member goes away.
type inFlightCase struct {
	name     string
	prepare  func(t *testing.T, ns, obj string)
	call     func(ctx context.Context, c *mcclient.Client, ns, obj string) error
	leaving  leaving
	answered bool // the held answer is let go within the grace
	want     func(error) bool
	applied  func(t *testing.T, ns, obj string) bool
}

func noPrepare(*testing.T, string, string) {}

func exists(t *testing.T, ns, obj string) bool { return adminGet(t, "c1", ns, obj) != nil }

func statusReason(t *testing.T, ns, obj string) string {
	t.Helper()
	var d appsv1.Deployment
	if err := admin(t, "c1").Get(context.Background(), crclient.ObjectKey{Namespace: ns, Name: obj}, &d); err != nil {
		t.Fatal(err)
	}
	for _, c := range d.Status.Conditions {
		if c.Type == "MccrTest" {
			return c.Reason
		}
	}
	return ""
}

func withReason(d *appsv1.Deployment, reason string) {
	d.Status.Conditions = append(d.Status.Conditions, appsv1.DeploymentCondition{
		Type: "MccrTest", Status: corev1.ConditionTrue, Reason: reason, Message: "set by mccr's tests",
	})
}

func isSuccess(err error) bool { return err == nil }

// isUnknownOnly: ErrOutcomeUnknown, and none of the errors that say
// nothing was sent.
func isUnknownOnly(err error) bool {
	return errors.Is(err, mcclient.ErrOutcomeUnknown) && !errors.Is(err, mcclient.ErrClusterNotFound) && !errors.Is(err, mcclient.ErrClusterNotReady)
}

// TestWritesInFlightWhenTheirClusterLeaves: writes of every kind the
// fake API server does not serve (server-side apply, the status
// subresource) and an API error, sent through a Server's fan-out client
// to a member that is deleted or restarted before their answer comes,
// return the API server's answer when it comes within the grace, and
// ErrOutcomeUnknown otherwise, within the bound (the members' write
// grace, here their graceful shutdown timeout); the API server did apply
// them. A write made once the member is gone or not Ready sends nothing.
// No goroutine is left once the Server stops.
func TestWritesInFlightWhenTheirClusterLeaves(t *testing.T) {
	adm := admin(t, "c1")
	ns := testNamespace(t)
	// The kit's clients of the fleet live on; their connections are closed
	// before the check, once the Server has stopped.
	leakCheck(t)
	t.Cleanup(fleet.CloseConnections)
	srv := outcomeServer(t, ns)
	c := srv.GetClient()
	apply := func(ctx context.Context, c *mcclient.Client, ns, obj string) error {
		return c.Apply(ctx, corev1ac.ConfigMap(obj, ns).WithData(map[string]string{"applied": "yes"}), crclient.FieldOwner("mccr-test"))
	}
	applied := func(t *testing.T, ns, obj string) bool {
		cm := adminGet(t, "c1", ns, obj)
		return cm != nil && cm.Data["applied"] == "yes"
	}
	prepareDeployment := func(t *testing.T, ns, obj string) { adminCreate(t, "c1", deployment(ns, obj)) }
	statusUpdate := func(ctx context.Context, c *mcclient.Client, ns, obj string) error {
		var d appsv1.Deployment
		if err := adm.Get(context.Background(), crclient.ObjectKey{Namespace: ns, Name: obj}, &d); err != nil {
			return err
		}
		withReason(&d, "InFlight")
		return c.Status().Update(ctx, &d)
	}
	statusApplied := func(t *testing.T, ns, obj string) bool { return statusReason(t, ns, obj) == "InFlight" }
	prepareCM := func(t *testing.T, ns, obj string) { adminCreate(t, "c1", configMap(ns, obj, nil)) }
	create := func(ctx context.Context, c *mcclient.Client, ns, obj string) error {
		return c.Create(ctx, configMap(ns, obj, map[string]string{"by": "fan-out"}))
	}
	remove := func(ctx context.Context, c *mcclient.Client, ns, obj string) error {
		return c.Delete(ctx, configMap(ns, obj, nil))
	}
	cases := []inFlightCase{
		{"Apply", noPrepare, apply, leaveByUpdate, false, isUnknownOnly, applied},
		{"Apply", noPrepare, apply, leaveByDelete, true, isSuccess, applied},
		{"Status().Update", prepareDeployment, statusUpdate, leaveByUpdate, true, isSuccess, statusApplied},
		{"Status().Update", prepareDeployment, statusUpdate, leaveByDelete, false, isUnknownOnly, statusApplied},
		{"Create AlreadyExists", prepareCM, create, leaveByUpdate, true, apierrors.IsAlreadyExists, exists},
		{"Create AlreadyExists", prepareCM, create, leaveByDelete, true, apierrors.IsAlreadyExists, exists},
		{"Delete", prepareCM, remove, leaveByUpdate, false, isUnknownOnly, func(t *testing.T, ns, obj string) bool { return !exists(t, ns, obj) }},
		{"Create", noPrepare, create, leaveByDelete, false, isUnknownOnly, exists},
	}
	var worst time.Duration
	for i, tc := range cases {
		answer := "unanswered"
		if tc.answered {
			answer = "answered"
		}
		t.Run(fmt.Sprintf("%s/%s/%s", tc.name, tc.leaving.how, answer), func(t *testing.T) {
			var slow slowanswer.Holder
			defer slow.Release()
			name := fmt.Sprintf("inflight-%d", i)
			obj := fmt.Sprintf("obj-%d", i)
			if err := srv.Add(heldNamed(name, &slow, "mccr-test/first")); err != nil {
				t.Fatal(err)
			}
			waitReady(t, srv, name)
			tc.prepare(t, ns, obj)
			slow.Hold()
			done := make(chan error, 1)
			go func() { done <- tc.call(in(name), c, ns, obj) }()
			test.Eventually(t, 20*time.Second, "the write's answer held", func() bool { return slow.Held() == 1 })
			gone := routeGone(t, c, name)
			left := make(chan error, 1)
			go func() { left <- tc.leaving.leave(srv, name, &slow) }()
			test.Eventually(t, 10*time.Second, "the route ended", gone)
			ended := time.Now()
			if tc.answered {
				time.Sleep(200 * time.Millisecond) // a cut at the route's end would have happened by now
				slow.Release()
			}
			err := waitResult(t, done, memberShutdown+10*time.Second, "the write's return")
			took := time.Since(ended)
			worst = max(worst, took)
			if !tc.want(err) {
				t.Errorf("%s when the cluster left by %s (%s) = %v", tc.name, tc.leaving.how, answer, err)
			}
			// The members' grace, and slack for a loaded machine: well
			// below the fan-out client's own grace (10s), which the
			// members' would otherwise leave to end the write.
			if bound := memberShutdown + 5*time.Second; took > bound {
				t.Errorf("returned %s after the route ended, over the bound %s", took, bound)
			}
			if !tc.applied(t, ns, obj) {
				t.Errorf("the API server does not hold %s's effect: the test proves nothing", tc.name)
			}
			if err := waitResult(t, left, 30*time.Second, tc.leaving.how); err != nil {
				t.Fatal(err)
			}
			t.Logf("figure: %s, left by %s, %s: %s after the route ended (%s)", tc.name, tc.leaving.how, answer, took.Round(time.Millisecond), outcome(err))
		})
	}
	t.Logf("figure: worst return %s after the route ended (members' write grace %s)", worst.Round(time.Millisecond), memberShutdown)

	t.Run("after the route ended", func(t *testing.T) {
		var slow slowanswer.Holder
		if err := srv.Add(heldNamed("gone", &slow, "mccr-test/first")); err != nil {
			t.Fatal(err)
		}
		waitReady(t, srv, "gone")
		// Restarted towards an address that refuses connections: known,
		// never Ready again.
		down := rest.CopyConfig(fleet.Cluster("c1").Config)
		down.Host = "https://127.0.0.1:1"
		if err := srv.Update(config.NewNamedConfig("gone", down)); err != nil {
			t.Fatal(err)
		}
		if err := create(in("gone"), c, ns, "after-restart"); !errors.Is(err, mcclient.ErrClusterNotReady) || errors.Is(err, mcclient.ErrOutcomeUnknown) {
			t.Errorf("Create in a cluster restarted and not Ready = %v, want ErrClusterNotReady", err)
		}
		if err := srv.Delete("gone"); err != nil {
			t.Fatal(err)
		}
		if err := create(in("gone"), c, ns, "after-delete"); !errors.Is(err, mcclient.ErrClusterNotFound) || errors.Is(err, mcclient.ErrOutcomeUnknown) {
			t.Errorf("Create in a deleted cluster = %v, want ErrClusterNotFound", err)
		}
		for _, obj := range []string{"after-restart", "after-delete"} {
			if exists(t, ns, obj) {
				t.Errorf("%s was created though the call said nothing was sent", obj)
			}
		}
		if n := slow.Answered(); n != 0 {
			t.Errorf("%d writes reached the API server", n)
		}
	})
}

// ensureOne is a reconciler's step done as the package documentation
// says: make sure one ConfigMap labelled trial=label exists in ns of
// cluster, creating it with generateName. After ErrOutcomeUnknown the
// Create may have been applied: it reads (List by the label, uncached)
// before creating again, from then on. After ErrClusterNotFound or
// ErrClusterNotReady nothing was sent: it creates again once the cluster
// is back. The first attempt's error goes to first.
func ensureOne(ctx context.Context, c *mcclient.Client, reader crclient.Reader, cluster, ns, label string, first chan<- error) error {
	readFirst := false
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if readFirst {
			var l corev1.ConfigMapList
			if err := reader.List(ctx, &l, crclient.InNamespace(ns), crclient.MatchingLabels{"trial": label}); err != nil {
				return err
			}
			if len(l.Items) > 0 {
				return nil
			}
		}
		cm := &corev1.ConfigMap{}
		cm.Namespace, cm.GenerateName, cm.Labels = ns, "gn-", map[string]string{"trial": label}
		err := c.Create(known.WithCluster(ctx, cluster), cm)
		if attempt == 0 {
			first <- err
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, mcclient.ErrOutcomeUnknown):
			readFirst = true
		case errors.Is(err, mcclient.ErrClusterNotFound), errors.Is(err, mcclient.ErrClusterNotReady):
			time.Sleep(20 * time.Millisecond) // the cluster comes back by itself
		default:
			return err
		}
	}
}

// TestGenerateNameRetryMakesNoDuplicates: trials of a Create with
// generateName whose answer is held while its member is deleted or
// restarted, the answer let go at once, a little later, or never (cut
// within the members' grace), retried as the documentation says, never
// make a second object; the first attempt never says that nothing was
// sent.
func TestGenerateNameRetryMakesNoDuplicates(t *testing.T) {
	const trials = 20
	ns := testNamespace(t)
	srv := outcomeServer(t, ns)
	c := srv.GetClient()
	reader := admin(t, "c1")
	var slow slowanswer.Holder
	defer slow.Release()
	const name = "gn"
	if err := srv.Add(heldNamed(name, &slow, "mccr-test/first")); err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]int{}
	duplicates := 0
	var worst time.Duration
	for i := range trials {
		waitReady(t, srv, name)
		label := fmt.Sprintf("trial-%02d", i)
		how := []leaving{leaveByUpdate, leaveByDelete}[i%2]
		// 0: answer let go as the route ends; 1: 500ms later; 2, 3: never.
		release := i % 4
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		first := make(chan error, 1)
		result := make(chan error, 1)
		slow.Hold()
		go func() { result <- ensureOne(ctx, c, reader, name, ns, label, first) }()
		test.Eventually(t, 20*time.Second, "the Create's answer held", func() bool { return slow.Held() == 1 })
		gone := routeGone(t, c, name)
		left := make(chan error, 1)
		go func() { left <- how.leave(srv, name, &slow) }()
		test.Eventually(t, 10*time.Second, "the route ended", gone)
		ended := time.Now()
		switch release {
		case 0:
			slow.Release()
		case 1:
			time.Sleep(500 * time.Millisecond)
			slow.Release()
		}
		err := waitResult(t, first, memberShutdown+10*time.Second, "the first attempt's return")
		took := time.Since(ended)
		worst = max(worst, took)
		slow.Release()
		outcomes[outcome(err)]++
		if errors.Is(err, mcclient.ErrClusterNotFound) || errors.Is(err, mcclient.ErrClusterNotReady) {
			t.Errorf("trial %d: the first Create, which the API server applied, returned %v", i, err)
		}
		if err := waitResult(t, left, 30*time.Second, how.how); err != nil {
			t.Fatal(err)
		}
		how.back(t, srv, name, &slow)
		if err := waitResult(t, result, time.Minute, "the retry loop"); err != nil {
			t.Fatalf("trial %d: %v", i, err)
		}
		cancel()
		var l corev1.ConfigMapList
		if err := reader.List(context.Background(), &l, crclient.InNamespace(ns), crclient.MatchingLabels{"trial": label}); err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 1 {
			duplicates += len(l.Items) - 1
			t.Errorf("trial %d (%s, release %d, first attempt %s): %d objects", i, how.how, release, outcome(err), len(l.Items))
		}
	}
	kinds := make([]string, 0, len(outcomes))
	for k, n := range outcomes {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	t.Logf("figure: %d trials; first attempts: %s; duplicates: %d; worst return %s after the route ended (members' write grace %s)",
		trials, strings.Join(kinds, ", "), duplicates, worst.Round(time.Millisecond), memberShutdown)
}
