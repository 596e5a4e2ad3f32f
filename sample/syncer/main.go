package main

import (
	"flag"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/sample/internal/cmd"
	"github.com/mccr-dev/mccr/sample/syncer/api/v1alpha1"
	"github.com/mccr-dev/mccr/server"
)

// newScheme holds client-go's kinds and the sample's.
func newScheme() *runtime.Scheme {
	return cmd.NewScheme(v1alpha1.AddToScheme)
}

func main() {
	var clustersPath, providersFile string
	var allowAuthPlugins bool
	var opts syncerOptions
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
	// Parse the command line, with the flags every sample has
	// (--metrics-bind-address, --health-probe-bind-address, --leader-elect,
	// --leader-election-namespace, --log-json, --verbosity), and log as it
	// says (ctrl.SetLogger).
	common := cmd.ParseFlags("syncs")

	if (clustersPath == "") == (providersFile == "") {
		cmd.SetupLog.Error(nil, "give exactly one of --clusters and --access-providers")
		os.Exit(2)
	}
	if opts.PatrolPeriod <= 0 {
		cmd.SetupLog.Error(nil, "--patrol-period must be positive")
		os.Exit(2)
	}

	// The host cluster (--kubeconfig, $KUBECONFIG or in-cluster) holds the
	// FleetSettings, the leader election Lease, metrics and probes.
	srv, err := server.NewServer(ctrl.GetConfigOrDie(), common.Options(newScheme(), "syncer.sample.mccr.dev"))
	cmd.ExitOnError(err, "unable to create server")
	cmd.ExitOnError(setup(srv, opts), "unable to set up the syncer")

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
	cmd.ExitOnError(err, "unable to watch the member clusters")
	srv.Watch(watcher)

	cmd.AddPingChecks(srv)

	cmd.SetupLog.Info("starting server", "patrolPeriod", opts.PatrolPeriod)
	cmd.ExitOnError(srv.Start(ctrl.SetupSignalHandler()), "problem running server")
}
