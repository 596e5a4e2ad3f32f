package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/sample/internal/cmd"
	"github.com/mccr-dev/mccr/sample/internal/reconciler"
	"github.com/mccr-dev/mccr/server"
)

// The cluster sources this sample reads (--source).
const (
	sourceSecrets         = "secrets"
	sourceArgoCD          = "argocd"
	sourceClusterAPI      = "cluster-api"
	sourceClusterProfiles = "cluster-profiles"
)

// sourceFlags are the flags that choose and shape the cluster source.
type sourceFlags struct {
	source           string
	namespace        string
	providersFile    string
	requireAvailable bool
	publishUnhealthy bool
	allowAuthPlugins bool
}

func main() {
	var sf sourceFlags
	flag.StringVar(&sf.source, "source", "",
		"Where the member clusters are listed on the host cluster: "+
			"secrets (multicluster-runtime kubeconfig Secrets), argocd (Argo CD cluster Secrets), "+
			"cluster-api (Cluster API Clusters and their <name>-kubeconfig Secrets), "+
			"cluster-profiles (Cluster Inventory API ClusterProfiles).")
	flag.StringVar(&sf.namespace, "namespace", "",
		"Namespace of the Secrets, Clusters or ClusterProfiles. Defaults: secrets \""+configwatcher.DefaultSecretNamespace+
			"\", argocd \""+configwatcher.DefaultArgoCDNamespace+"\", cluster-api and cluster-profiles every namespace.")
	flag.StringVar(&sf.providersFile, "access-providers-file", "",
		"cluster-profiles: the access providers file ({\"providers\":[{\"name\":…,\"execConfig\":{…}}]}) naming the credential plugins to run.")
	flag.BoolVar(&sf.requireAvailable, "require-available", false,
		"cluster-api: add a cluster once its Available condition is True, not already once its control plane is initialized.")
	flag.BoolVar(&sf.publishUnhealthy, "publish-unhealthy", false,
		"cluster-profiles: add a cluster whatever its ControlPlaneHealthy condition says.")
	flag.BoolVar(&sf.allowAuthPlugins, "allow-auth-plugins", false,
		"secrets, argocd, cluster-api: accept credentials that run a program (exec, auth-provider, Argo CD execProviderConfig). "+
			"Whoever can write those objects could then run programs here.")
	// Parse the command line, with the flags every sample has
	// (--metrics-bind-address, --health-probe-bind-address, --leader-elect,
	// --leader-election-namespace, --log-json, --verbosity), and log as it
	// says (ctrl.SetLogger).
	common := cmd.ParseFlags("runs the members")

	// The host cluster (--kubeconfig, $KUBECONFIG or in-cluster) holds the
	// inventory. It also holds the leader election Lease and serves metrics
	// and probes; these are the ctrl.Options a single-cluster main would
	// pass to ctrl.NewManager.
	hostConfig := ctrl.GetConfigOrDie()
	watcher, err := newWatcher(hostConfig, sf)
	if err != nil {
		cmd.SetupLog.Error(err, "unable to watch the cluster inventory", "source", sf.source)
		os.Exit(2)
	}
	srv, err := server.NewServer(hostConfig, common.Options(cmd.NewScheme(), "inventory.sample.mccr.dev"))
	cmd.ExitOnError(err, "unable to create server")

	r := &reconciler.ConfigMapReconciler{Client: srv.GetClient(), Scheme: srv.GetScheme()}
	srv.AddReconcilerSetup(r.SetupWithManager)

	// Added, Updated and Deleted events become srv.Add, srv.Update and
	// srv.Delete; problems with one object are logged, naming it, and the
	// rest of the fleet carries on. The server stops the watcher when
	// Start returns.
	srv.Watch(watcher)

	cmd.AddPingChecks(srv)

	cmd.SetupLog.Info("starting server", "source", sf.source)
	cmd.ExitOnError(srv.Start(ctrl.SetupSignalHandler()), "problem running server")
}

// newWatcher makes the watcher of the chosen source.
func newWatcher(host *rest.Config, sf sourceFlags) (configwatcher.ConfigWatcher, error) {
	log := configwatcher.WithLogger(ctrl.Log.WithName(sf.source))
	var namespaces []string
	if sf.namespace != "" {
		namespaces = []string{sf.namespace}
	}
	switch sf.source {
	case sourceSecrets, sourceArgoCD:
		opts := []configwatcher.SecretOption{log}
		if sf.source == sourceArgoCD {
			opts = append(opts, configwatcher.ArgoCDFormat())
		}
		if sf.namespace != "" {
			opts = append(opts, configwatcher.WithSecretNamespace(sf.namespace))
		}
		if sf.allowAuthPlugins {
			opts = append(opts, configwatcher.AllowAuthPlugins())
		}
		return configwatcher.NewSecretWatcher(host, opts...)
	case sourceClusterAPI:
		opts := []configwatcher.ClusterAPIOption{log, configwatcher.WithClusterAPINamespaces(namespaces...)}
		if sf.requireAvailable {
			opts = append(opts, configwatcher.RequireAvailable())
		}
		if sf.allowAuthPlugins {
			opts = append(opts, configwatcher.AllowAuthPlugins())
		}
		return configwatcher.NewClusterAPIWatcher(host, opts...)
	case sourceClusterProfiles:
		opts := []configwatcher.ClusterProfileOption{log,
			configwatcher.WithAccessProvidersFile(sf.providersFile),
			configwatcher.WithClusterProfileNamespaces(namespaces...)}
		if sf.publishUnhealthy {
			opts = append(opts, configwatcher.PublishUnhealthy())
		}
		return configwatcher.NewClusterProfileWatcher(host, opts...)
	}
	return nil, fmt.Errorf("--source %q: want %s, %s, %s or %s", sf.source, sourceSecrets, sourceArgoCD, sourceClusterAPI, sourceClusterProfiles)
}
