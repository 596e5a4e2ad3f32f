package main

import (
	"flag"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/sample/internal/cmd"
	"github.com/mccr-dev/mccr/sample/internal/reconciler"
	"github.com/mccr-dev/mccr/server"
)

func main() {
	var clustersPath string
	var allowAuthPlugins bool
	flag.StringVar(&clustersPath, "clusters", "",
		"A kubeconfig file, or a directory of them, watched for changes: every context is a member cluster. "+
			"(--kubeconfig, as in any controller-runtime program, is the host cluster.)")
	flag.BoolVar(&allowAuthPlugins, "allow-auth-plugins", false,
		"Accept kubeconfig users with exec or auth-provider entries (they run programs); "+
			"only for a directory nobody untrusted can write to.")
	// Parse the command line, with the flags every sample has
	// (--metrics-bind-address, --health-probe-bind-address, --leader-elect,
	// --leader-election-namespace, --log-json, --verbosity), and log as it
	// says (ctrl.SetLogger).
	common := cmd.ParseFlags("runs the members")

	if clustersPath == "" {
		cmd.SetupLog.Error(nil, "--clusters is required")
		os.Exit(2)
	}

	// The host cluster (--kubeconfig, $KUBECONFIG or in-cluster) holds the
	// leader election Lease and serves metrics and probes; these are the
	// ctrl.Options a single-cluster main would pass to ctrl.NewManager.
	srv, err := server.NewServer(ctrl.GetConfigOrDie(), common.Options(cmd.NewScheme(), "filewatcher.sample.mccr.dev"))
	cmd.ExitOnError(err, "unable to create server")

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
	cmd.ExitOnError(err, "unable to watch cluster kubeconfigs", "path", clustersPath)
	// Added, Updated and Deleted events become srv.Add, srv.Update and
	// srv.Delete. The server stops the watcher when Start returns.
	srv.Watch(watcher)

	cmd.AddPingChecks(srv)

	cmd.SetupLog.Info("starting server", "watching", clustersPath)
	cmd.ExitOnError(srv.Start(ctrl.SetupSignalHandler()), "problem running server")
}
