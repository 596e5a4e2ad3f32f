package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/internal/conntrack"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// This file holds what the fault, credential, churn and security suites
// share: a Server started for one test, a reconciler that records the
// highest data.seq it has seen per (cluster, object), and a writer that
// bumps data.seq in rounds and checks every write gets reconciled.

// seenSeq is the highest seq a cluster reconciled for one object, and when the
// reconciler first saw it.
type seenSeq struct {
	seq int
	at  time.Time
}

// seqRecorder is an ordinary reconciler: it reads the ConfigMap through the
// fan-out client (so through the cluster named in ctx) and records its
// data.seq. With ack, it also writes <name>-ack with the same seq, through
// the same client, before it records: a recorded seq then proves a write
// with the member's credentials succeeded.
type seqRecorder struct {
	cl  client.Client
	ack bool

	mu      sync.Mutex
	seen    map[string]map[string]seenSeq // cluster → object → highest
	errs    map[string]int                // cluster → failed reconciles
	lastErr map[string]error
}

func newSeqRecorder(cl client.Client, ack bool) *seqRecorder {
	return &seqRecorder{cl: cl, ack: ack, seen: map[string]map[string]seenSeq{}, errs: map[string]int{}, lastErr: map[string]error{}}
}

func (r *seqRecorder) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster, _ := known.ClusterFrom(ctx)
	if strings.HasSuffix(req.Name, "-ack") {
		return ctrl.Result{}, nil
	}
	var cm corev1.ConfigMap
	if err := r.cl.Get(ctx, req.NamespacedName, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		r.fail(cluster, err)
		return ctrl.Result{}, err
	}
	seq, err := strconv.Atoi(cm.Data["seq"])
	if err != nil {
		seq = 0
	}
	if r.ack {
		if err := r.writeAck(ctx, req.NamespacedName, seq); err != nil {
			r.fail(cluster, err)
			return ctrl.Result{}, err
		}
	}
	r.record(cluster, req.Name, seq)
	return ctrl.Result{}, nil
}

func (r *seqRecorder) writeAck(ctx context.Context, key types.NamespacedName, seq int) error {
	ack := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name + "-ack", Namespace: key.Namespace},
		Data:       map[string]string{"seq": strconv.Itoa(seq)},
	}
	// One request per reconcile once the ack exists: a Patch, falling back
	// to a Create the first time.
	patch := fmt.Appendf(nil, `{"data":{"seq":%q}}`, strconv.Itoa(seq))
	err := r.cl.Patch(ctx, ack.DeepCopy(), client.RawPatch(types.MergePatchType, patch))
	if !apierrors.IsNotFound(err) {
		return err
	}
	return r.cl.Create(ctx, ack)
}

func (r *seqRecorder) fail(cluster string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs[cluster]++
	r.lastErr[cluster] = err
}

func (r *seqRecorder) record(cluster, name string, seq int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[cluster] == nil {
		r.seen[cluster] = map[string]seenSeq{}
	}
	if old, ok := r.seen[cluster][name]; !ok || seq > old.seq {
		r.seen[cluster][name] = seenSeq{seq: seq, at: time.Now()}
	}
}

// behind returns the objects of cluster not yet reconciled at seq or later.
func (r *seqRecorder) behind(cluster string, objs []string, seq int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, o := range objs {
		if s, ok := r.seen[cluster][o]; !ok || s.seq < seq {
			out = append(out, o)
		}
	}
	return out
}

func (r *seqRecorder) get(cluster, obj string) (seenSeq, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.seen[cluster][obj]
	return s, ok
}

func (r *seqRecorder) failures(cluster string) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errs[cluster], r.lastErr[cluster]
}

// faultServer is a Server started for one test.
type faultServer struct {
	srv  *server.Server
	rec  *seqRecorder
	stop func() error
}

// startFaultServer starts a Server on the fleet's host whose caches see only ns,
// with a seqRecorder registered through AddReconcilerSetup, and stops it
// when the test ends.
func startFaultServer(t testing.TB, ns string, log logr.Logger, ack bool, opts ...server.Option) *faultServer {
	t.Helper()
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	srv, err := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{
		Logger:                 log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	rec := newSeqRecorder(srv.GetClient(), ack)
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("seq-" + ns).For(&corev1.ConfigMap{}).Complete(rec)
	})
	stop := test.Run(t, srv)
	return &faultServer{srv: srv, rec: rec, stop: stop}
}

// waitPhase waits until cluster is in phase, and returns its status.
func waitPhase(t testing.TB, srv *server.Server, cluster string, phase server.Phase, within time.Duration) server.ClusterStatus {
	t.Helper()
	var st server.ClusterStatus
	test.Eventually(t, within, cluster+" "+string(phase), func() bool {
		var err error
		st, err = srv.Status(cluster)
		return err == nil && st.Phase == phase
	})
	return st
}

// objNames are the names configMaps creates.
func objNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("cm-%d", i)
	}
	return out
}

// writeTarget is a member as the writer sees it: its name in the Server, and
// the fleet cluster (API server) its objects live in.
type writeTarget struct{ name, fleet string }

func membersNamed(names ...string) []writeTarget {
	out := make([]writeTarget, len(names))
	for i, n := range names {
		out[i] = writeTarget{n, n}
	}
	return out
}

// setSeq writes data.seq of one ConfigMap, retrying briefly (a connection
// broken by a killed API server is redialled on the next try).
func setSeq(ctx context.Context, cl client.Client, ns, name string, seq int) error {
	patch := fmt.Appendf(nil, `{"data":{"seq":%q}}`, strconv.Itoa(seq))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	var err error
	for range 5 {
		if err = cl.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch)); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// writeRound sets data.seq = seq on every object of every target, one
// goroutine per target, and returns when each write returned.
func writeRound(t testing.TB, targets []writeTarget, ns string, objs []string, seq int) map[string]map[string]time.Time {
	t.Helper()
	out := make(map[string]map[string]time.Time, len(targets))
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, len(targets))
	clients := make([]client.Client, len(targets))
	for i, tg := range targets {
		clients[i] = adminClient(t, tg.fleet)
	}
	for i, tg := range targets {
		wg.Go(func() {
			at := make(map[string]time.Time, len(objs))
			for _, o := range objs {
				if err := setSeq(context.Background(), clients[i], ns, o, seq); err != nil {
					errs[i] = fmt.Errorf("writing seq %d to %s/%s in %s: %w", seq, ns, o, tg.fleet, err)
					return
				}
				at[o] = time.Now()
			}
			mu.Lock()
			out[tg.name] = at
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Error(err)
	}
	return out
}

// awaitSeq waits until cluster has reconciled every object at seq or later,
// or until deadline. It returns the objects still behind (nil: none) and,
// per object, how long after its write it was first reconciled at seq.
func awaitSeq(rec *seqRecorder, cluster string, objs []string, seq int, written map[string]time.Time, deadline time.Time) (behind []string, lags []time.Duration) {
	for {
		behind = rec.behind(cluster, objs, seq)
		if len(behind) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, o := range objs {
		s, ok := rec.get(cluster, o)
		w, wok := written[o]
		if !ok || !wok || s.seq < seq {
			continue
		}
		lags = append(lags, max(s.at.Sub(w), 0))
	}
	return behind, lags
}

// workload is a steady writer: round after round it bumps data.seq of n
// objects in each member and checks that every member reconciles every
// object at that seq within bound of the write. A round not reconciled
// within bound is an error ("missed"); the writer then waits up to limit
// before it goes on, so one slow round does not cascade.
type workload struct {
	t       testing.TB
	rec     *seqRecorder
	ns      string
	objs    []string
	targets []writeTarget
	bound   time.Duration
	limit   time.Duration

	pause sync.Mutex // held by a round; hold it to keep the writer idle

	mu     sync.Mutex
	seq    int
	rounds int
	lags   []time.Duration
	missed []string
	cancel context.CancelFunc
	done   chan struct{}
}

func newWorkload(t testing.TB, rec *seqRecorder, ns string, n int, targets []writeTarget, bound time.Duration) *workload {
	return &workload{t: t, rec: rec, ns: ns, objs: objNames(n), targets: targets, bound: bound, limit: 30 * time.Second}
}

// start runs rounds in the background until stop.
func (w *workload) start() {
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel, w.done = cancel, make(chan struct{})
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			w.round()
		}
	}()
}

// stop ends the rounds and waits for the one in flight.
func (w *workload) stop() {
	w.cancel()
	<-w.done
}

// round writes and checks one round; it returns its seq.
func (w *workload) round() int {
	w.pause.Lock()
	defer w.pause.Unlock()
	w.mu.Lock()
	w.seq++
	seq := w.seq
	w.mu.Unlock()
	written := writeRound(w.t, w.targets, w.ns, w.objs, seq)
	for _, tg := range w.targets {
		last, ok := lastWrite(written[tg.name])
		if !ok {
			continue // the write failed, and said so
		}
		behind, lags := awaitSeq(w.rec, tg.name, w.objs, seq, written[tg.name], last.Add(w.bound))
		if len(behind) > 0 {
			more, _ := awaitSeq(w.rec, tg.name, w.objs, seq, nil, last.Add(w.limit))
			msg := fmt.Sprintf("round %d: %s had not reconciled %v at seq %d within %s of the write (still behind after %s: %v)", seq, tg.name, behind, seq, w.bound, w.limit, more)
			w.t.Error(msg)
			w.mu.Lock()
			w.missed = append(w.missed, msg)
			w.mu.Unlock()
		}
		w.mu.Lock()
		w.lags = append(w.lags, lags...)
		w.mu.Unlock()
	}
	w.mu.Lock()
	w.rounds++
	w.mu.Unlock()
	return seq
}

// waitRounds waits until n more rounds have completed.
func (w *workload) waitRounds(t testing.TB, n int) {
	t.Helper()
	w.mu.Lock()
	want := w.rounds + n
	w.mu.Unlock()
	test.Eventually(t, time.Duration(n)*(w.limit+10*time.Second), fmt.Sprintf("%d rounds", n), func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.rounds >= want
	})
}

// workloadSummary is what a workload saw: its rounds, the reconciles
// checked, the rounds that missed the bound, and write→reconcile lag
// percentiles.
type workloadSummary struct {
	rounds, checked, missed int
	p50, p99, maxLag        time.Duration
}

// summary reports rounds, reconciles checked, misses and lag percentiles.
func (w *workload) summary() workloadSummary {
	w.mu.Lock()
	defer w.mu.Unlock()
	lags := slices.Clone(w.lags)
	slices.Sort(lags)
	sum := workloadSummary{rounds: w.rounds, checked: len(lags), missed: len(w.missed)}
	if len(lags) > 0 {
		sum.p50, sum.p99, sum.maxLag = lags[len(lags)/2], lags[len(lags)*99/100], lags[len(lags)-1]
	}
	return sum
}

func (w *workload) report(t testing.TB, what string) {
	t.Helper()
	sum := w.summary()
	t.Logf("figure: %s: %d rounds, %d (cluster, object, seq) reconciles checked, %d rounds missed the %s bound; write→reconcile p50 %s, p99 %s, max %s",
		what, sum.rounds, sum.checked, sum.missed, w.bound, dur(sum.p50), dur(sum.p99), dur(sum.maxLag))
}

// lastWrite returns the latest of a target's write times, if it has any.
func lastWrite(written map[string]time.Time) (time.Time, bool) {
	var last time.Time
	for _, at := range written {
		if at.After(last) {
			last = at
		}
	}
	return last, !last.IsZero()
}

func dur(d time.Duration) string { return d.Round(time.Millisecond).String() }

// writeFileAtomically writes data to a hidden temporary file next to path
// (a FileWatcher skips hidden files) and renames it over path, the way
// editors and config management tools replace a file. It returns the time
// just before the rename, when the change becomes visible.
func writeFileAtomically(t testing.TB, path string, data []byte) time.Time {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return at
}

// kubeconfigBytes serialises a one-context kubeconfig reaching cfg.
func kubeconfigBytes(t testing.TB, name string, cfg *rest.Config) []byte {
	t.Helper()
	raw, err := clientcmd.Write(test.KubeconfigFor(name, cfg))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// saToken mints a token of a cluster-admin ServiceAccount in cluster and
// deletes the account when the test ends.
func saToken(t testing.TB, cluster, ns, sa string) string {
	t.Helper()
	cfg := fleet.Cluster(cluster).Config
	tok, err := test.ServiceAccountToken(context.Background(), cfg, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = test.DeleteServiceAccount(context.Background(), cfg, ns, sa) })
	return tok
}

// revokeSA deletes a ServiceAccount and waits until the API server rejects
// tok, which it does once the deletion reached its own cache.
func revokeSA(t testing.TB, cluster, ns, sa, tok string) time.Duration {
	t.Helper()
	cfg := fleet.Cluster(cluster).Config
	begin := time.Now()
	if err := test.DeleteServiceAccount(context.Background(), cfg, ns, sa); err != nil {
		t.Fatal(err)
	}
	tcfg, conns := conntrack.Wrap(test.TokenConfig(cfg, tok))
	defer conns.Close()
	tcfg.NegotiatedSerializer = serializer.WithoutConversionCodecFactory{CodecFactory: scheme.Codecs}
	rc, err := rest.UnversionedRESTClientFor(tcfg)
	if err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 30*time.Second, "token of "+ns+"/"+sa+" rejected", func() bool {
		return apierrors.IsUnauthorized(rc.Get().AbsPath("/api").Do(context.Background()).Error())
	})
	return time.Since(begin)
}
