package main

import (
	"flag"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/sample/internal/cmd"
	"github.com/mccr-dev/mccr/sample/internal/reconciler"
	"github.com/mccr-dev/mccr/server"
)

func main() {
	var kubefedNamespace string
	var requireReady bool
	flag.StringVar(&kubefedNamespace, "kubefed-namespace", configwatcher.DefaultKubeFedNamespace,
		"Namespace of the host cluster holding the KubeFedClusters and their Secrets.")
	flag.BoolVar(&requireReady, "require-ready", false,
		"Run only in the clusters KubeFed reports Ready (by default mccr checks every cluster's health itself).")
	// Parse the command line, with the flags every sample has
	// (--metrics-bind-address, --health-probe-bind-address, --leader-elect,
	// --leader-election-namespace, --log-json, --verbosity), and log as it
	// says (ctrl.SetLogger).
	common := cmd.ParseFlags("runs the members")

	// The host cluster (--kubeconfig, $KUBECONFIG or in-cluster) is where
	// KubeFed keeps its KubeFedClusters. It also holds the leader election
	// Lease and serves metrics and probes; these are the ctrl.Options a
	// single-cluster main would pass to ctrl.NewManager.
	hostConfig := ctrl.GetConfigOrDie()
	srv, err := server.NewServer(hostConfig, common.Options(cmd.NewScheme(), "kubefed.sample.mccr.dev"))
	cmd.ExitOnError(err, "unable to create server")

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
	cmd.ExitOnError(err, "unable to watch KubeFedClusters")
	// Added, Updated and Deleted events become srv.Add, srv.Update and
	// srv.Delete. The server stops the watcher when Start returns.
	srv.Watch(watcher)

	cmd.AddPingChecks(srv)

	cmd.SetupLog.Info("starting server", "kubefedNamespace", kubefedNamespace)
	cmd.ExitOnError(srv.Start(ctrl.SetupSignalHandler()), "problem running server")
}
