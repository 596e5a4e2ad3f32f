package main

import (
	"flag"
	"log/slog"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/sample/internal/reconciler"
	"github.com/mccr-dev/mccr/server"
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
}

func main() {
	var metricsAddr, probeAddr, leaderElectionNamespace, clustersPath string
	var enableLeaderElection, allowAuthPlugins, jsonLogs bool
	var verbosity int
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0",
		"The address the metrics endpoint binds to, e.g. :8080. 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081",
		"The address the health probe endpoint binds to.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false,
		"Enable leader election on the host cluster, so that only one replica runs the members at a time.")
	flag.StringVar(&leaderElectionNamespace, "leader-election-namespace", "",
		"Namespace of the leader election Lease on the host cluster (required out of cluster).")
	flag.StringVar(&clustersPath, "clusters", "",
		"A kubeconfig file, or a directory of them, watched for changes: every context is a member cluster. "+
			"(--kubeconfig, as in any controller-runtime program, is the host cluster.)")
	flag.BoolVar(&allowAuthPlugins, "allow-auth-plugins", false,
		"Accept kubeconfig users with exec or auth-provider entries (they run programs); "+
			"only for a directory nobody untrusted can write to.")
	flag.BoolVar(&jsonLogs, "log-json", false, "Log JSON lines instead of text.")
	flag.IntVar(&verbosity, "verbosity", 0, "Log verbosity: 0 logs what matters, higher logs more.")
	flag.Parse()
	ctrl.SetLogger(newLogger(jsonLogs, verbosity))

	if clustersPath == "" {
		setupLog.Error(nil, "--clusters is required")
		os.Exit(2)
	}

	// The host cluster (--kubeconfig, $KUBECONFIG or in-cluster) holds the
	// leader election Lease and serves metrics and probes; these are the
	// ctrl.Options a single-cluster main would pass to ctrl.NewManager.
	srv, err := server.NewServer(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          enableLeaderElection,
		LeaderElectionID:        "filewatcher.sample.mccr.dev",
		LeaderElectionNamespace: leaderElectionNamespace,
	})
	if err != nil {
		setupLog.Error(err, "unable to create server")
		os.Exit(1)
	}

	r := &reconciler.ConfigMapReconciler{Client: srv.GetClient(), Scheme: srv.GetScheme()}
	srv.AddReconcilerSetup(r.SetupWithManager)

	var watchOpts []configwatcher.FileOption
	if allowAuthPlugins {
		watchOpts = append(watchOpts, configwatcher.AllowAuthPlugins())
	}
	// The watcher reports every context present now as Added, then each
	// change: a file dropped in, edited, or removed. It must exist
	// already (an empty directory is an empty fleet).
	watcher, err := configwatcher.NewFileWatcher(clustersPath, watchOpts...)
	if err != nil {
		setupLog.Error(err, "unable to watch cluster kubeconfigs", "path", clustersPath)
		os.Exit(1)
	}
	// Added, Updated and Deleted events become srv.Add, srv.Update and
	// srv.Delete. The server stops the watcher when Start returns.
	srv.Watch(watcher)

	if err := srv.GetHostManager().AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up health check")
		os.Exit(1)
	}
	if err := srv.GetHostManager().AddReadyzCheck("readyz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up ready check")
		os.Exit(1)
	}

	setupLog.Info("starting server", "watching", clustersPath)
	if err := srv.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "problem running server")
		os.Exit(1)
	}
}

// newLogger logs through log/slog, which needs nothing beyond the standard
// library; any logr.Logger works (kubebuilder's zap setup too).
func newLogger(jsonLogs bool, verbosity int) logr.Logger {
	opts := &slog.HandlerOptions{Level: slog.Level(-verbosity)}
	if jsonLogs {
		return logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, opts))
	}
	return logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, opts))
}
