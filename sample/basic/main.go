package main

import (
	"flag"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mccr-dev/mccr/sample/internal/cmd"
	"github.com/mccr-dev/mccr/sample/internal/reconciler"
	"github.com/mccr-dev/mccr/server"
)

func main() {
	var clustersPath string
	flag.StringVar(&clustersPath, "clusters", "",
		"A kubeconfig file, or a directory of them: every context is a member cluster. "+
			"(--kubeconfig, as in any controller-runtime program, is the host cluster.)")
	// Parse the command line, with the flags every sample has
	// (--metrics-bind-address, --health-probe-bind-address, --leader-elect,
	// --leader-election-namespace, --log-json, --verbosity), and log as it
	// says (ctrl.SetLogger).
	common := cmd.ParseFlags("runs the members")

	// Every context of --clusters is a member, loaded once here
	// (config.LoadConfigsFromConfigFile); one broken file does not take the
	// rest of the fleet down.
	configs := cmd.LoadClusters(clustersPath)

	// The host cluster (--kubeconfig, $KUBECONFIG or in-cluster) holds the
	// leader election Lease and serves metrics and probes; these are the
	// ctrl.Options a single-cluster main would pass to ctrl.NewManager.
	srv, err := server.NewServer(ctrl.GetConfigOrDie(), common.Options(cmd.NewScheme(), "basic.sample.mccr.dev"))
	cmd.ExitOnError(err, "unable to create server")

	for _, cfg := range configs {
		cmd.ExitOnError(srv.Add(cfg), "unable to add cluster", "cluster", cfg.Name)
	}

	r := &reconciler.ConfigMapReconciler{Client: srv.GetClient(), Scheme: srv.GetScheme()}
	srv.AddReconcilerSetup(r.SetupWithManager)

	cmd.AddPingChecks(srv)

	cmd.SetupLog.Info("starting server", "clusters", srv.ClusterNames())
	cmd.ExitOnError(srv.Start(ctrl.SetupSignalHandler()), "problem running server")
}
