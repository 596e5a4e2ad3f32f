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
	"github.com/mccr-dev/mccr/sample/syncer/api/v1alpha1"
	"github.com/mccr-dev/mccr/server"
)

var setupLog = ctrl.Log.WithName("setup")

// newScheme holds client-go's kinds and the sample's.
func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

func main() {
	var metricsAddr, probeAddr, leaderElectionNamespace, clustersPath, providersFile string
	var enableLeaderElection, allowAuthPlugins, jsonLogs bool
	var verbosity int
	var opts syncerOptions
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0",
		"The address the metrics endpoint binds to, e.g. :8080. 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081",
		"The address the health probe endpoint binds to.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false,
		"Enable leader election on the host cluster, so that only one replica syncs at a time.")
	flag.StringVar(&leaderElectionNamespace, "leader-election-namespace", "",
		"Namespace of the leader election Lease on the host cluster (required out of cluster).")
	flag.StringVar(&clustersPath, "clusters", "",
		"A kubeconfig file, or a directory of them, watched for changes: every context is a member cluster. "+
			"(--kubeconfig, as in any controller-runtime program, is the host cluster.)")
	flag.StringVar(&providersFile, "access-providers", "",
		"Instead of --clusters: the members are the host's ClusterProfiles (a Cluster Inventory), reached "+
			"through the access providers this file lists; their properties are what clusterSelector matches.")
	flag.BoolVar(&allowAuthPlugins, "allow-auth-plugins", false,
		"With --clusters: accept kubeconfig users with exec or auth-provider entries (they run programs); "+
			"only for a directory nobody untrusted can write to.")
	flag.DurationVar(&opts.PatrolPeriod, "patrol-period", defaultPatrolPeriod,
		"How often every member's copies are compared with the host's FleetSettings, and drift repaired, "+
			"whatever the events.")
	flag.BoolVar(&jsonLogs, "log-json", false, "Log JSON lines instead of text.")
	flag.IntVar(&verbosity, "verbosity", 0, "Log verbosity: 0 logs what matters, higher logs more.")
	flag.Parse()
	ctrl.SetLogger(newLogger(jsonLogs, verbosity))

	if (clustersPath == "") == (providersFile == "") {
		setupLog.Error(nil, "give exactly one of --clusters and --access-providers")
		os.Exit(2)
	}
	if opts.PatrolPeriod <= 0 {
		setupLog.Error(nil, "--patrol-period must be positive")
		os.Exit(2)
	}

	// The host cluster (--kubeconfig, $KUBECONFIG or in-cluster) holds the
	// FleetSettings, the leader election Lease, metrics and probes.
	srv, err := server.NewServer(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                  newScheme(),
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          enableLeaderElection,
		LeaderElectionID:        "syncer.sample.mccr.dev",
		LeaderElectionNamespace: leaderElectionNamespace,
	})
	if err != nil {
		setupLog.Error(err, "unable to create server")
		os.Exit(1)
	}
	if err := setup(srv, opts); err != nil {
		setupLog.Error(err, "unable to set up the syncer")
		os.Exit(1)
	}

	var watcher configwatcher.ConfigWatcher
	if clustersPath != "" {
		var watchOpts []configwatcher.FileOption
		if allowAuthPlugins {
			watchOpts = append(watchOpts, configwatcher.AllowAuthPlugins())
		}
		watcher, err = configwatcher.NewFileWatcher(clustersPath, watchOpts...)
	} else {
		watcher, err = configwatcher.NewClusterProfileWatcher(srv.GetConfig(), configwatcher.WithAccessProvidersFile(providersFile))
	}
	if err != nil {
		setupLog.Error(err, "unable to watch the member clusters")
		os.Exit(1)
	}
	srv.Watch(watcher)

	if err := srv.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up health check")
		os.Exit(1)
	}
	if err := srv.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up ready check")
		os.Exit(1)
	}

	setupLog.Info("starting server", "patrolPeriod", opts.PatrolPeriod)
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
