package e2e

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// rotationGoal is how soon after a credential change the member must run on
// the new credentials.
const rotationGoal = 2 * time.Second

// usesToken reports whether cluster is Ready with a Manager whose config
// carries tok.
func usesToken(srv *server.Server, cluster, tok string) bool {
	mgr, err := srv.GetManager(cluster)
	return err == nil && mgr.GetConfig().BearerToken == tok
}

// waitToken polls (every 2ms, to measure) until cluster is Ready on tok,
// and returns how long after since that was.
func waitToken(t testing.TB, srv *server.Server, cluster, tok string, since time.Time, within time.Duration) time.Duration {
	t.Helper()
	deadline := since.Add(within)
	for !usesToken(srv, cluster, tok) {
		if time.Now().After(deadline) {
			st, _ := srv.Status(cluster)
			t.Fatalf("%s not Ready on the new credentials within %s (phase %s, last error %v)", cluster, within, st.Phase, st.LastError)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(since)
}

// checkAcks verifies, through the test's own client, that the reconciler's
// writes (made with the member's credentials) hold the last seq written.
func checkAcks(t testing.TB, fleetCluster, ns string, n, seq int) {
	t.Helper()
	for _, o := range objNames(n) {
		var ack corev1.ConfigMap
		test.Eventually(t, 10*time.Second, o+"-ack at seq "+strconv.Itoa(seq), func() bool {
			err := adminClient(t, fleetCluster).Get(context.Background(), client.ObjectKey{Namespace: ns, Name: o + "-ack"}, &ack)
			got, _ := strconv.Atoi(ack.Data["seq"])
			return err == nil && got >= seq
		})
	}
}

// rotationScenario is what the file and KubeFed rotation tests share: a
// member reached with a ServiceAccount token, a steady writer whose every
// round the member must reconcile (and ack, with its credentials) around
// the rotation, the rotation itself, and the revocation of the old token.
type rotationScenario struct {
	name, fleetCluster, ns string
	n                      int
	tok1, tok2             string
	sa1                    string
}

func (s rotationScenario) run(t *testing.T, r *faultServer, rotate func() time.Time, via string) {
	waitToken(t, r.srv, s.name, s.tok1, time.Now(), 60*time.Second)
	w := newWorkload(t, r.rec, s.ns, s.n, []writeTarget{{s.name, s.fleetCluster}}, 10*time.Second)
	w.start()
	defer w.stop()
	w.waitRounds(t, 3)

	changed := rotate()
	took := waitToken(t, r.srv, s.name, s.tok2, changed, 30*time.Second)
	w.waitRounds(t, 3)

	// The old token is revoked: the member, on the new one, goes on.
	revokedIn := revokeSA(t, s.fleetCluster, s.ns, s.sa1, s.tok1)
	w.waitRounds(t, 5)
	w.stop()
	st, _ := r.srv.Status(s.name)
	if st.Phase != server.PhaseReady || !usesToken(r.srv, s.name, s.tok2) {
		t.Errorf("%s is %s after the old token was revoked (last error %v), want Ready on the new token", s.name, st.Phase, st.LastError)
	}
	if st.Failures != 0 {
		t.Errorf("%s failed %d times (last error %v)", s.name, st.Failures, st.LastError)
	}
	sum := w.summary()
	if sum.missed > 0 {
		t.Errorf("%d of %d rounds were not reconciled in time around the rotation", sum.missed, sum.rounds)
	}
	w.mu.Lock()
	last := w.seq
	w.mu.Unlock()
	checkAcks(t, s.fleetCluster, s.ns, s.n, last)
	if took > rotationGoal {
		t.Errorf("new credentials in use %s after the change, want ≤ %s", dur(took), rotationGoal)
	}
	t.Logf("figure: rotation (%s): %s → Ready on the new token in %s (goal ≤ %s)", via, via, dur(took), rotationGoal)
	t.Logf("figure: rotation (%s): %d rounds × %d objects, %d reconciles (each with a write on the member's credentials) checked, %d rounds lost; slowest write→reconcile %s (the member's credentials renewed in place, no restart); old token rejected %s after revocation, member stayed Ready",
		via, sum.rounds, s.n, sum.checked, sum.missed, dur(sum.maxLag), dur(revokedIn))
}

// TestCredRotationFile rotates a member's ServiceAccount token by replacing
// its kubeconfig file (write a temporary file, rename it over), then revokes
// the old token.
func TestCredRotationFile(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: slow fault test against real API servers; make test runs it")
	}
	const name, on, n = "rot-file", "b", 5
	ns := namespace(t, "cred-file")
	configMaps(t, on, ns, n)
	s := rotationScenario{name: name, fleetCluster: on, ns: ns, n: n, sa1: "rot-1",
		tok1: saToken(t, on, ns, "rot-1"), tok2: saToken(t, on, ns, "rot-2")}
	cfg := fleet.Cluster(on).Config
	dir := t.TempDir()
	path := filepath.Join(dir, name+".kubeconfig")
	writeFileAtomically(t, path, kubeconfigBytes(t, name, test.TokenConfig(cfg, s.tok1)))

	r := startFaultServer(t, ns, logr.Discard(), true)
	fw, err := configwatcher.NewFileWatcher(dir)
	if err != nil {
		t.Fatal(err)
	}
	r.srv.Watch(fw)
	s.run(t, r, func() time.Time {
		return writeFileAtomically(t, path, kubeconfigBytes(t, name, test.TokenConfig(cfg, s.tok2)))
	}, "kubeconfig file replaced")
	if errs := r.srv.WatchErrors(); len(errs) > 0 {
		t.Errorf("watch errors: %v", errs)
	}
}

// TestCredRotationKubeFed rotates a member's token by updating the Secret
// its KubeFedCluster names, then revokes the old token.
func TestCredRotationKubeFed(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: slow fault test against real API servers; make test runs it")
	}
	const name, on, n = "rot-kubefed", "c", 5
	ns := namespace(t, "cred-kubefed")
	configMaps(t, on, ns, n)
	s := rotationScenario{name: name, fleetCluster: on, ns: ns, n: n, sa1: "rot-1",
		tok1: saToken(t, on, ns, "rot-1"), tok2: saToken(t, on, ns, "rot-2")}

	host := fleet.Cluster("host")
	crds, err := test.KubeFedCRDPath()
	if err != nil {
		t.Fatal(err)
	}
	if err := test.InstallCRDs(host.Config, crds); err != nil {
		t.Fatal(err)
	}
	fedNS := "kubefed-" + ns // on the host
	j, err := test.JoinKubeFed(context.Background(), host.Config, fedNS, name, fleet.Cluster(on).Config, s.tok1)
	if err != nil {
		t.Fatal(err)
	}

	r := startFaultServer(t, ns, logr.Discard(), true)
	kw, err := configwatcher.NewKubeFedWatcher(host.Config, configwatcher.WithKubeFedNamespace(fedNS))
	if err != nil {
		t.Fatal(err)
	}
	r.srv.Watch(kw)
	s.run(t, r, func() time.Time {
		at := time.Now()
		if err := j.RotateToken(context.Background(), s.tok2); err != nil {
			t.Fatal(err)
		}
		return at
	}, "KubeFed Secret updated")
	if errs := r.srv.WatchErrors(); len(errs) > 0 {
		t.Errorf("watch errors: %v", errs)
	}
}

// TestRevokedCredentialsFailMember deletes the ServiceAccount whose token a
// Ready member uses. The member must go Failed with an error about its
// credentials and be retried with backoff, while the other members go on
// reconciling every write.
func TestRevokedCredentialsFailMember(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: slow fault test against real API servers; make test runs it")
	}
	const name, on, n = "revoked", "c", 10
	ns := namespace(t, "cred-revoked")
	for _, m := range members {
		configMaps(t, m, ns, n)
	}
	tok := saToken(t, on, ns, "doomed")
	backoff := wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Jitter: 0.1, Cap: 4 * time.Second}
	r := startFaultServer(t, ns, logr.Discard(), true, func(o *server.Options) { o.Backoff = backoff })
	for _, m := range []string{"a", "b"} {
		if err := r.srv.Add(fleet.Cluster(m).Named); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.srv.Add(config.NewNamedConfig(name, test.TokenConfig(fleet.Cluster(on).Config, tok))); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"a", "b", name} {
		waitPhase(t, r.srv, m, server.PhaseReady, 60*time.Second)
	}
	// The others are kept busy throughout.
	w := newWorkload(t, r.rec, ns, n, membersNamed("a", "b"), 2*time.Second)
	w.start()
	defer w.stop()
	w.waitRounds(t, 2)

	phases := watchPhases(r.srv, name)
	defer func() { phases.stop() }()
	revokedAt := time.Now()
	rejectedIn := revokeSA(t, on, ns, "doomed", tok)
	// Something for the member to do with its revoked token: its
	// reconciler's writes now fail.
	writeRound(t, []writeTarget{{name, on}}, ns, objNames(n), 1)

	var failed server.ClusterStatus
	detected := true
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		failed, _ = r.srv.Status(name)
		if failed.Phase == server.PhaseFailed {
			break
		}
		if detected && time.Now().After(deadline) {
			errs, last := r.rec.failures(name)
			t.Errorf("credential loss not detected: %s still %s (since %s, last error %v) %s after its token was revoked (%s after the API server began rejecting it); meanwhile %d of its reconciles failed, the last with: %v",
				name, failed.Phase, failed.Since.Format("15:04:05.000"), failed.LastError, dur(time.Since(revokedAt)), dur(time.Since(revokedAt)-rejectedIn), errs, last)
			// Go on with a restart forced by a changed config, to check
			// what follows detection: the error, the retries, the others.
			detected = false
			forced := config.NewNamedConfig(name, test.TokenConfig(fleet.Cluster(on).Config, tok))
			forced.Config.UserAgent = "forced-restart"
			if err := r.srv.Update(forced); err != nil {
				t.Fatal(err)
			}
			phases.stop()
			phases = watchPhases(r.srv, name)
		}
	}
	detectedIn := time.Since(revokedAt)
	msg := strings.ToLower(errString(failed.LastError))
	if !strings.Contains(msg, "credentials") && !strings.Contains(msg, "unauthorized") {
		t.Errorf("%s's error does not say what is wrong: %v", name, failed.LastError)
	}
	if failed.NextRetry.IsZero() {
		t.Errorf("%s is Failed with no retry planned", name)
	}

	// Retried with growing delays, never Ready again.
	type attempt struct {
		failures int
		delay    time.Duration
	}
	var attempts []attempt
	test.Eventually(t, 60*time.Second, name+" retried three times", func() bool {
		st, _ := r.srv.Status(name)
		if st.Phase == server.PhasePending || st.Phase == server.PhaseReady {
			t.Fatalf("%s is %s with a revoked token", name, st.Phase)
		}
		if st.Phase == server.PhaseFailed && (len(attempts) == 0 || attempts[len(attempts)-1].failures != st.Failures) {
			attempts = append(attempts, attempt{st.Failures, st.NextRetry.Sub(st.Since)})
		}
		return len(attempts) >= 4
	})
	for i := 1; i < len(attempts); i++ {
		if attempts[i].delay < attempts[i-1].delay {
			t.Errorf("retry delays do not grow: %v", attempts)
		}
	}
	w.waitRounds(t, 3)
	w.stop()
	if _, ready := phases.first(server.PhaseReady, revokedAt.Add(time.Millisecond)); ready {
		t.Errorf("%s was Ready again with a revoked token: %s", name, phases)
	}
	if missed := w.summary().missed; missed > 0 {
		t.Errorf("the other members missed %d rounds", missed)
	}
	delays := make([]string, len(attempts))
	for i, a := range attempts {
		delays[i] = dur(a.delay)
	}
	how := "by itself"
	if !detected {
		how = "only after a restart forced by Update (NOT detected by the running member)"
	}
	t.Logf("figure: revoked: token rejected by the API server %s after the ServiceAccount deletion; %s Failed %s after the deletion, %s; error: %v", dur(rejectedIn), name, dur(detectedIn), how, failed.LastError)
	t.Logf("figure: revoked: retry delays of successive failures %v (backoff %s ×%g, cap %s)", delays, backoff.Duration, backoff.Factor, backoff.Cap)
	w.report(t, "revoked: other members (a, b)")
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
