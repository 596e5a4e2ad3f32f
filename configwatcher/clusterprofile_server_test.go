package configwatcher_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/known"
	mccrserver "github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// tappedWatcher passes a watcher's events on, noting when each cluster
// was first Added.
type tappedWatcher struct {
	configwatcher.ConfigWatcher
	events chan configwatcher.Event
	mu     sync.Mutex
	added  map[string]time.Time
}

func tap(w configwatcher.ConfigWatcher) *tappedWatcher {
	t := &tappedWatcher{ConfigWatcher: w, events: make(chan configwatcher.Event, 16), added: map[string]time.Time{}}
	// Ends once w's Events is closed and drained: the Server reads
	// Events until then.
	go func() {
		defer close(t.events)
		for ev := range w.Events() {
			if ev.Type == configwatcher.Added {
				t.mu.Lock()
				if _, ok := t.added[ev.Config.Name]; !ok {
					t.added[ev.Config.Name] = time.Now()
				}
				t.mu.Unlock()
			}
			t.events <- ev
		}
	}()
	return t
}

func (t *tappedWatcher) Events() <-chan configwatcher.Event { return t.events }

func (t *tappedWatcher) addedAt(name string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.added[name]
	return at, ok
}

// whoAmI is a reconciler that asks its member who it is there (a
// SelfSubjectReview, made with the member's own client) on every
// ConfigMap of one namespace, and notes the answer.
type whoAmI struct {
	ns string
	c  client.Client

	mu    sync.Mutex
	first time.Time // first reconcile of anything
	user  string    // the last answer
	at    time.Time // when it came
	errs  []error
}

func (r *whoAmI) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.mu.Lock()
	if r.first.IsZero() {
		r.first = time.Now()
	}
	r.mu.Unlock()
	if req.Namespace != r.ns {
		return ctrl.Result{}, nil
	}
	if _, ok := known.ClusterFrom(ctx); !ok {
		return ctrl.Result{}, fmt.Errorf("no cluster in the reconcile context")
	}
	r.mu.Lock()
	c := r.c
	r.mu.Unlock()
	ssr := &authenticationv1.SelfSubjectReview{}
	err := c.Create(ctx, ssr)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs = append(r.errs, err)
		return ctrl.Result{}, err
	}
	r.user, r.at = ssr.Status.UserInfo.Username, time.Now()
	return ctrl.Result{}, nil
}

func (r *whoAmI) last() (user string, at, first time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.user, r.at, r.first
}

// testTokenRefreshThroughServer: a Server fed by a ClusterProfileWatcher
// reaches a member through the exec plugin, whose short-lived credentials
// client-go renews by running the plugin again. The token the plugin hands
// out is rotated to another ServiceAccount's, and the old ServiceAccount
// deleted (which revokes its tokens): the member goes on reconciling as
// the new identity, without a restart.
func (e *clusterProfileEnv) testTokenRefreshThroughServer(t *testing.T) {
	ctx := t.Context()
	ns := e.namespace(t, e.hostClient)
	const cluster, saNS = "rot", "mccr-system"
	oldSA, newSA := "cp-rot-old", "cp-rot-new"
	oldToken, err := test.ServiceAccountToken(ctx, e.member.Config, saNS, oldSA)
	if err != nil {
		t.Fatal(err)
	}
	newToken, err := test.ServiceAccountToken(ctx, e.member.Config, saNS, newSA)
	if err != nil {
		t.Fatal(err)
	}
	// The plugin's credentials expire after a second, so client-go runs
	// it again for every request a second after the last run.
	e.writeToken(t, cluster, oldToken, time.Second)

	memberAdmin := e.member.AdminClient(t)
	workNS := e.namespace(t, memberAdmin)
	w, err := configwatcher.NewClusterProfileWatcher(e.host.Config,
		configwatcher.WithAccessProvidersFile(e.providersFile),
		configwatcher.WithClusterProfileNamespaces(ns),
		configwatcher.WithLogger(testr.New(t)))
	if err != nil {
		t.Fatal(err)
	}
	tw := tap(w)
	srv := newWatchingServer(t, e.host.Config, testr.New(t), tw)
	rec := &whoAmI{ns: workNS}
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		rec.mu.Lock()
		rec.c = mgr.GetClient()
		rec.mu.Unlock()
		return ctrl.NewControllerManagedBy(mgr).Named("whoami-" + workNS).For(&corev1.ConfigMap{}).Complete(rec)
	})
	test.Run(t, srv)

	name := ns + "/" + cluster
	u := createClusterProfile(t, e.hostClient, ns, cluster, nil, cpStatus("False", nil, e.access(cpTokenFile, cluster, nil)))
	healthyAt := time.Now()
	setProfileStatus(t, e.hostClient, u, func(s map[string]any) { s["conditions"] = cpConditions("True") })
	test.Eventually(t, kfPatience, name+" Ready", func() bool {
		st, err := srv.Status(name)
		return err == nil && st.Phase == mccrserver.PhaseReady
	})
	addedAt, _ := tw.addedAt(name)
	_, _, first := rec.last()
	test.Eventually(t, kfPatience, "a first reconcile", func() bool { _, _, first = rec.last(); return !first.IsZero() })
	t.Logf("figure: ClusterProfile healthy → Added event: %s; → first reconcile in the member: %s",
		addedAt.Sub(healthyAt).Round(time.Millisecond), first.Sub(healthyAt).Round(time.Millisecond))

	// nudgeUntil makes the reconciler ask again, with a ConfigMap
	// change, until cond holds.
	seq := 0
	nudgeUntil := func(what string, cond func() bool) {
		t.Helper()
		test.Eventually(t, kfPatience, what, func() bool {
			if cond() {
				return true
			}
			seq++
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: workNS, Name: fmt.Sprintf("nudge-%d", seq)}}
			if err := memberAdmin.Create(ctx, cm); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond) // pace the nudges; cond is what is asserted
			return false
		})
	}
	identity := func(sa string) string { return "system:serviceaccount:" + saNS + ":" + sa }
	waitFor := func(user string, since time.Time) time.Time {
		t.Helper()
		var at time.Time
		nudgeUntil("the member reconciles as "+user, func() bool {
			var got string
			got, at, _ = rec.last()
			return got == user && !at.Before(since)
		})
		return at
	}
	member := func() (mccrserver.ClusterStatus, manager.Manager) {
		t.Helper()
		st, err := srv.Status(name)
		if err != nil {
			t.Fatal(err)
		}
		mgr, err := srv.GetManager(name)
		if err != nil {
			t.Fatal(err)
		}
		return st, mgr
	}
	waitFor(identity(oldSA), time.Time{})
	st0, mgr0 := member()

	// Rotate: the plugin hands out the new token from now on.
	rotated := time.Now()
	e.writeToken(t, cluster, newToken, time.Second)
	at := waitFor(identity(newSA), rotated)
	t.Logf("figure: token rotated → the member's first request with it: %s", at.Sub(rotated).Round(time.Millisecond))

	// Revoke the old token, and wait until the member's API server
	// refuses it.
	if err := test.DeleteServiceAccount(ctx, e.member.Config, saNS, oldSA); err != nil {
		t.Fatal(err)
	}
	old, err := kubernetes.NewForConfig(test.TokenConfig(e.member.Config, oldToken))
	if err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, kfPatience, "the old token refused", func() bool {
		_, err := old.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
		return apierrors.IsUnauthorized(err)
	})
	revoked, runs := time.Now(), e.runs(t, cluster)
	// Renewed twice more since, the member still works, as the new
	// identity.
	nudgeUntil("the plugin's credentials renewed after the revocation", func() bool { return e.runs(t, cluster) >= runs+2 })
	waitFor(identity(newSA), revoked)

	st, mgr := member()
	if st.Phase != mccrserver.PhaseReady || st.Restarts != st0.Restarts || st.Failures != st0.Failures || mgr != mgr0 {
		t.Fatalf("after the rotation: phase %s, restarts %d (was %d), failures %d (was %d), same Manager %v",
			st.Phase, st.Restarts, st0.Restarts, st.Failures, st0.Failures, mgr == mgr0)
	}

	// A label of the profile reaches reconcilers as a property, without a
	// restart.
	u.SetLabels(map[string]string{"tier": "gold"})
	if err := e.hostClient.Update(ctx, u); err != nil {
		t.Fatal(err)
	}
	labelled := time.Now()
	test.Eventually(t, kfPatience, "the label as a property", func() bool {
		p, err := srv.ClusterProperties(known.WithCluster(ctx, name))
		return err == nil && p[configwatcher.LabelPropertyPrefix+"tier"] == "gold"
	})
	t.Logf("figure: ClusterProfile label set → property seen by srv.ClusterProperties: %s", time.Since(labelled).Round(time.Millisecond))
	st, mgr = member()
	if st.Phase != mccrserver.PhaseReady || st.Restarts != st0.Restarts || mgr != mgr0 {
		t.Fatalf("after a label change: phase %s, restarts %d (was %d), same Manager %v", st.Phase, st.Restarts, st0.Restarts, mgr == mgr0)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.errs) > 0 {
		t.Errorf("reconcile errors: %v", rec.errs)
	}
}
