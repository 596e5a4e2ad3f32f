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
	var metricsAddr, probeAddr, leaderElectionNamespace, kubefedNamespace string
	var enableLeaderElection, requireReady, jsonLogs bool
	var verbosity int
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0",
		"The address the metrics endpoint binds to, e.g. :8080. 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081",
		"The address the health probe endpoint binds to.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false,
		"Enable leader election on the host cluster, so that only one replica runs the members at a time.")
	flag.StringVar(&leaderElectionNamespace, "leader-election-namespace", "",
		"Namespace of the leader election Lease on the host cluster (required out of cluster).")
	flag.StringVar(&kubefedNamespace, "kubefed-namespace", configwatcher.DefaultKubeFedNamespace,
		"Namespace of the host cluster holding the KubeFedClusters and their Secrets.")
	flag.BoolVar(&requireReady, "require-ready", false,
		"Run only in the clusters KubeFed reports Ready (by default mccr checks every cluster's health itself).")
	flag.BoolVar(&jsonLogs, "log-json", false, "Log JSON lines instead of text.")
	flag.IntVar(&verbosity, "verbosity", 0, "Log verbosity: 0 logs what matters, higher logs more.")
	flag.Parse()
	ctrl.SetLogger(newLogger(jsonLogs, verbosity))

	// The host cluster (--kubeconfig, $KUBECONFIG or in-cluster) is where
	// KubeFed keeps its KubeFedClusters. It also holds the leader election
	// Lease and serves metrics and probes; these are the ctrl.Options a
	// single-cluster main would pass to ctrl.NewManager.
	hostConfig := ctrl.GetConfigOrDie()
	srv, err := server.NewServer(hostConfig, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          enableLeaderElection,
		LeaderElectionID:        "kubefed.sample.mccr.dev",
		LeaderElectionNamespace: leaderElectionNamespace,
	})
	if err != nil {
		setupLog.Error(err, "unable to create server")
		os.Exit(1)
	}

	r := &reconciler.ConfigMapReconciler{Client: srv.GetClient(), Scheme: srv.GetScheme()}
	srv.AddReconcilerSetup(r.SetupWithManager)

	watchOpts := []configwatcher.KubeFedOption{
		configwatcher.WithKubeFedNamespace(kubefedNamespace),
		configwatcher.WithLogger(ctrl.Log.WithName("kubefed")),
	}
	if requireReady {
		watchOpts = append(watchOpts, configwatcher.RequireReady())
	}
	// Every KubeFedCluster (kubefedctl join) is a member, reached with the
	// token in the Secret it names; kubefedctl unjoin removes it again.
	// The watcher does not wait for the host: a missing KubeFed CRD is
	// reported and retried.
	watcher, err := configwatcher.NewKubeFedWatcher(hostConfig, watchOpts...)
	if err != nil {
		setupLog.Error(err, "unable to watch KubeFedClusters")
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

	setupLog.Info("starting server", "kubefedNamespace", kubefedNamespace)
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
