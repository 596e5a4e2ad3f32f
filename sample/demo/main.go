package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/sample/internal/reconciler"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

const (
	hostName = "host"
	// The tour runs its reconciler on member-1..3 from the start, adds
	// member-4 while it runs and removes member-2.
	joinLater = "member-4"
	leaveName = "member-2"
	namespace = "demo"

	// patience bounds every wait of the tour; a busy two-core machine
	// needs a few seconds where an idle one needs a fraction of one.
	patience = 60 * time.Second
	// untouchedFor is how long a ConfigMap in a removed member is watched
	// to show that nobody reconciles it any more.
	untouchedFor = 2 * time.Second

	exitInterrupted = 130
)

var (
	members = []string{"member-1", "member-2", "member-3", "member-4"}
	// errInterrupted ends the tour early on SIGINT or SIGTERM.
	errInterrupted = errors.New("interrupted")
)

func main() {
	wait := flag.Bool("wait", false, "After the tour, keep the fleet and the controller running until Ctrl-C.")
	logFile := flag.String("log-file", filepath.Join(os.TempDir(), "mccr-demo.log"),
		"Where the controller's own logs (controller-runtime, client-go) go; empty discards them.")
	flag.Parse()
	os.Exit(run(*wait, *logFile))
}

// demo is the state of one run; its methods are the steps of the tour.
type demo struct {
	start   time.Time
	root    string // everything on disk: kubeconfigs, etcd data, certificates
	watched string // the directory the controller watches
	fleet   *test.Fleet
	clients map[string]client.Client // each member's own admin client
	srv     *server.Server
	// stopController stops the server and waits for it; nil until
	// startController has started it.
	stopController func() error
	// fleetPage is the URL of the fleet page on the host's metrics server.
	fleetPage string

	mu      sync.Mutex
	stamped map[string]int // ConfigMaps the reconciler stamped, per cluster
}

func run(wait bool, logFile string) (code int) {
	ctx, stopSignals := notifyContext()
	defer stopSignals()

	d := &demo{start: time.Now(), clients: map[string]client.Client{}, stamped: map[string]int{}}
	logTo, closeLog, err := openLog(logFile)
	if err != nil {
		d.sayf("cannot open the log file: %v", err)
		return 1
	}
	defer closeLog()

	d.root, err = os.MkdirTemp("", "mccr-demo-")
	if err != nil {
		d.sayf("cannot create a temporary directory: %v", err)
		return 1
	}
	// envtest keeps each API server's certificates and etcd data in
	// TMPDIR: under root they are removed with it, whatever happens.
	_ = os.Setenv("TMPDIR", d.root)
	defer d.cleanup()

	d.sayf("mccr demo: one ordinary controller-runtime reconciler, running in every cluster of a fleet.")
	if logFile != "" {
		d.sayf("The controller's own logs go to %s.", logFile)
	}
	err = d.tour(ctx, logTo)
	switch {
	case errors.Is(err, errInterrupted):
		d.sayf("Interrupted.")
		return exitInterrupted
	case err != nil:
		d.sayf("The tour failed: %v", err)
		return 1
	}
	if !wait {
		d.sayf("Tour done. (Run with --wait, or `make demo DEMO_FLAGS=--wait`, to keep the fleet and the fleet page running and try it yourself;")
		d.sayf("without it, the API servers, their kubeconfigs and the page go away now.)")
		return 0
	}
	d.handsOn()
	<-ctx.Done()
	d.sayf("Ctrl-C: stopping.")
	return 0
}

// notifyContext is cancelled on the first SIGINT or SIGTERM. Later ones
// are caught too, so that a second Ctrl-C cannot kill the demo halfway
// through its cleanup and leave API servers behind.
func notifyContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		for n := 0; ; n++ {
			select {
			case <-sigs:
				if n > 0 {
					printMu.Lock()
					fmt.Println("  (still cleaning up: API servers are being stopped, please wait)")
					printMu.Unlock()
				}
				cancel()
			case <-done:
				return
			}
		}
	}()
	return ctx, func() { signal.Stop(sigs); close(done); cancel() }
}

func (d *demo) tour(ctx context.Context, logTo io.Writer) error {
	steps := []struct {
		title string
		do    func(context.Context) error
	}{
		{"Start a local fleet", d.startFleet},
		{"Start the controller, watching a directory of kubeconfigs", func(ctx context.Context) error { return d.startController(ctx, logTo) }},
		{"Give every member some work", d.work},
		{"Add a cluster while the controller runs", d.add},
		{"Remove a cluster while the controller runs", d.remove},
	}
	for i, s := range steps {
		if ctx.Err() != nil {
			return errInterrupted
		}
		fmt.Println()
		d.sayf("Step %d of %d: %s", i+1, len(steps), s.title)
		if err := s.do(ctx); err != nil {
			return err
		}
	}
	fmt.Println()
	d.summary()
	return nil
}

func (d *demo) startFleet(ctx context.Context) error {
	names := append([]string{hostName}, members...)
	d.sayf("Starting %d Kubernetes API servers (kube-apiserver + etcd each, no nodes): %s. This takes 10-30 s.", len(names), strings.Join(names, ", "))
	d.sayf("%s stands in for the cluster a controller runs in; %s joins the fleet later.", hostName, joinLater)
	started := time.Now()
	type result struct {
		fleet *test.Fleet
		err   error
	}
	res := make(chan result, 1)
	go func() {
		f, err := test.Start(test.Options{Dir: filepath.Join(d.root, "kubeconfigs")}, names...)
		res <- result{f, err}
	}()
	var r result
	select {
	case r = <-res:
	case <-ctx.Done():
		d.sayf("Interrupted while the API servers start; waiting for them to come up, to stop them.")
		r = <-res
	}
	if r.err != nil {
		if errors.Is(r.err, test.ErrBinariesMissing) {
			return fmt.Errorf("%w\n  (`make demo` builds them first)", r.err)
		}
		return r.err
	}
	d.fleet = r.fleet
	if ctx.Err() != nil {
		return errInterrupted
	}
	d.sayf("All %d up in %s. While the demo runs (the tour, or until Ctrl-C with --wait), kubectl works against each of them:", len(names), since(started))
	for _, c := range d.fleet.Clusters {
		if exists(c.KubeconfigPath) {
			d.sayf("    kubectl --kubeconfig %s get configmaps -A", c.KubeconfigPath)
		}
	}
	for _, name := range members {
		c, err := d.fleet.Cluster(name).Client(client.Options{})
		if err != nil {
			return err
		}
		d.clients[name] = c
	}
	return nil
}

func (d *demo) startController(ctx context.Context, logTo io.Writer) error {
	d.watched = filepath.Join(d.root, "clusters")
	if err := os.Mkdir(d.watched, 0o700); err != nil {
		return err
	}
	for _, name := range members {
		if name == joinLater {
			continue
		}
		if err := d.dropKubeconfig(name); err != nil {
			return err
		}
	}
	d.sayf("Copied the kubeconfigs of member-1, member-2 and member-3 into %s.", d.watched)

	logger := logr.FromSlogHandler(slog.NewTextHandler(logTo, nil))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	host := d.fleet.Cluster(hostName)
	// The host's metrics server, on a loopback port of its own, serves
	// /metrics and the fleet page.
	metricsAddr, err := freeLoopbackAddr()
	if err != nil {
		return err
	}
	d.srv, err = server.NewServer(host.Config, ctrl.Options{
		Scheme:                 clientgoscheme.Scheme,
		Logger:                 logger,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: "0",
	}, func(o *server.Options) { o.FleetPage = true })
	if err != nil {
		return err
	}
	d.fleetPage = "http://" + metricsAddr + "/fleetz"
	r := &reconciler.ConfigMapReconciler{Client: d.srv.GetClient(), Scheme: d.srv.GetScheme(), Stamped: d.onStamped}
	d.srv.AddReconcilerSetup(r.SetupWithManager)
	w, err := configwatcher.NewFileWatcher(d.watched)
	if err != nil {
		return err
	}
	d.srv.Watch(w)
	d.sayf("The controller is the one in sample/filewatcher: server.NewServer on %s, configwatcher.NewFileWatcher on that directory, srv.Watch.", hostName)
	d.sayf("Its reconciler stamps every ConfigMap labelled %s=true with %s=<the cluster it found it in>.", reconciler.EnabledLabel, reconciler.SeenInAnnotation)

	srvCtx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- d.srv.Start(srvCtx) }()
	narrated := make(chan struct{})
	go func() { defer close(narrated); d.narrate(srvCtx) }()
	d.stopController = func() error {
		cancel()
		err := <-stopped
		<-narrated
		return err
	}
	if err := d.waitFor(ctx, "member-1, member-2 and member-3 to be ready", func() (bool, error) {
		return d.readyCount() == 3, nil
	}); err != nil {
		return err
	}
	d.sayf("fleet page: %s (every member, its phase, source, reachability and reconciles; reloads itself while the demo runs)", d.fleetPage)
	return nil
}

func (d *demo) work(ctx context.Context) error {
	d.sayf("Creating ConfigMap %s/greeting, labelled %s=true, in member-1, member-2 and member-3 (straight through each one's API server, as kubectl would).", namespace, reconciler.EnabledLabel)
	for _, name := range []string{"member-1", "member-2", "member-3"} {
		if err := d.createConfigMap(ctx, name, "greeting"); err != nil {
			return err
		}
	}
	for _, name := range []string{"member-1", "member-2", "member-3"} {
		if err := d.waitStamped(ctx, name, "greeting"); err != nil {
			return err
		}
	}
	d.sayf("Checked through each member's own API server: every greeting names the cluster it lives in.")
	return nil
}

func (d *demo) add(ctx context.Context) error {
	if err := d.createConfigMap(ctx, joinLater, "greeting"); err != nil {
		return err
	}
	d.sayf("%s already runs and holds a ConfigMap %s/greeting, but the controller does not know it yet.", joinLater, namespace)
	if err := d.dropKubeconfig(joinLater); err != nil {
		return err
	}
	d.sayf("Dropped %s.kubeconfig into %s (written under a hidden name, then renamed).", joinLater, d.watched)
	if err := d.waitFor(ctx, joinLater+" to be ready", func() (bool, error) {
		st, err := d.srv.Status(joinLater)
		return err == nil && st.Phase == server.PhaseReady, nil
	}); err != nil {
		return err
	}
	if err := d.waitStamped(ctx, joinLater, "greeting"); err != nil {
		return err
	}
	d.sayf("%s joined live: its existing ConfigMap was reconciled without restarting anything.", joinLater)
	return nil
}

func (d *demo) remove(ctx context.Context) error {
	if err := os.Remove(filepath.Join(d.watched, leaveName+".kubeconfig")); err != nil {
		return err
	}
	d.sayf("Deleted %s.kubeconfig from %s.", leaveName, d.watched)
	if err := d.waitFor(ctx, leaveName+" to leave the fleet", func() (bool, error) {
		_, err := d.srv.Status(leaveName)
		return errors.Is(err, server.ErrClusterNotFound), nil
	}); err != nil {
		return err
	}
	d.sayf("Creating ConfigMap %s/after-removal in %s and in member-1.", namespace, leaveName)
	for _, name := range []string{leaveName, "member-1"} {
		if err := d.createConfigMap(ctx, name, "after-removal"); err != nil {
			return err
		}
	}
	if err := d.waitStamped(ctx, "member-1", "after-removal"); err != nil {
		return err
	}
	deadline := time.Now().Add(untouchedFor)
	for time.Now().Before(deadline) {
		seen, err := d.seenIn(ctx, leaveName, "after-removal")
		if err != nil {
			return err
		}
		if seen != "" {
			return fmt.Errorf("%s was removed, yet its ConfigMap got stamped %q", leaveName, seen)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	d.sayf("%s's after-removal stayed unstamped for %s: nothing reconciles %s any more; the other members carry on.", leaveName, untouchedFor, leaveName)
	return nil
}

// handsOn tells what to try while the fleet keeps running (--wait).
func (d *demo) handsOn() {
	fmt.Println()
	m1 := d.fleet.Cluster("member-1").KubeconfigPath
	left := d.fleet.Cluster(leaveName).KubeconfigPath
	m3 := filepath.Join(d.watched, "member-3.kubeconfig")
	d.sayf("The fleet and the controller keep running; the fleet page is at %s. Try, in another terminal:", d.fleetPage)
	if exists(m1) {
		d.sayf("    kubectl --kubeconfig %s -n %s create configmap hello --from-literal=say=hi", m1, namespace)
		d.sayf("    kubectl --kubeconfig %s -n %s label configmap hello %s=true", m1, namespace, reconciler.EnabledLabel)
		d.sayf("    kubectl --kubeconfig %s -n %s get configmap hello -o jsonpath='{.metadata.annotations}'", m1, namespace)
	}
	if exists(left) && !exists(filepath.Join(d.watched, leaveName+".kubeconfig")) {
		d.sayf("    cp %s %s/    # %s joins again", left, d.watched, leaveName)
	}
	if exists(m3) {
		d.sayf("    rm %s    # member-3 leaves", m3)
	}
	d.sayf("Press Ctrl-C to stop everything and clean up.")
}

func (d *demo) summary() {
	d.sayf("What the controller did:")
	in := map[string]server.ClusterStatus{}
	for _, st := range d.srv.Statuses() {
		in[st.Name] = st
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Printf("    %-10s %-22s %s\n", "CLUSTER", "IN THE FLEET", "CONFIGMAPS STAMPED")
	for _, name := range members {
		state := "no (removed)"
		if st, ok := in[name]; ok {
			state = "yes, " + string(st.Phase)
		}
		fmt.Printf("    %-10s %-22s %d\n", name, state, d.stamped[name])
	}
}

// cleanup stops whatever was started, in reverse order, and removes every
// file the demo wrote (but the log).
func (d *demo) cleanup() {
	fmt.Println()
	d.sayf("Cleaning up.")
	if d.stopController != nil {
		started := time.Now()
		if err := d.stopController(); err != nil {
			d.sayf("  the controller stopped with an error: %v", err)
		} else {
			d.sayf("  stopped the controller (%s)", since(started))
		}
	}
	if d.fleet != nil {
		started := time.Now()
		if err := d.fleet.Stop(); err != nil {
			d.sayf("  stopping the API servers: %v", err)
		} else {
			d.sayf("  stopped %d API servers and their etcds (%s)", len(d.fleet.Clusters), since(started))
		}
	}
	// A start that failed halfway, or a process that ignored its stop
	// signal: anything still running from under root is ours.
	if n := killLeftovers(d.root); n > 0 {
		d.sayf("  killed %d leftover process(es)", n)
	}
	if err := os.RemoveAll(d.root); err != nil {
		d.sayf("  removing %s: %v", d.root, err)
	} else {
		d.sayf("  removed %s", d.root)
	}
}
