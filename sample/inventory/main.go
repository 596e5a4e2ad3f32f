package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
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
	var metricsAddr, probeAddr, leaderElectionNamespace string
	var enableLeaderElection, jsonLogs bool
	var verbosity int
	var sf sourceFlags
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0",
		"The address the metrics endpoint binds to, e.g. :8080. 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081",
		"The address the health probe endpoint binds to.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false,
		"Enable leader election on the host cluster, so that only one replica runs the members at a time.")
	flag.StringVar(&leaderElectionNamespace, "leader-election-namespace", "",
		"Namespace of the leader election Lease on the host cluster (required out of cluster).")
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
	flag.BoolVar(&jsonLogs, "log-json", false, "Log JSON lines instead of text.")
	flag.IntVar(&verbosity, "verbosity", 0, "Log verbosity: 0 logs what matters, higher logs more.")
	flag.Parse()
	ctrl.SetLogger(newLogger(jsonLogs, verbosity))

	// The host cluster (--kubeconfig, $KUBECONFIG or in-cluster) holds the
	// inventory. It also holds the leader election Lease and serves metrics
	// and probes; these are the ctrl.Options a single-cluster main would
	// pass to ctrl.NewManager.
	hostConfig := ctrl.GetConfigOrDie()
	watcher, err := newWatcher(hostConfig, sf)
	if err != nil {
		setupLog.Error(err, "unable to watch the cluster inventory", "source", sf.source)
		os.Exit(2)
	}
	srv, err := server.NewServer(hostConfig, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          enableLeaderElection,
		LeaderElectionID:        "inventory.sample.mccr.dev",
		LeaderElectionNamespace: leaderElectionNamespace,
	})
	if err != nil {
		setupLog.Error(err, "unable to create server")
		os.Exit(1)
	}

	r := &reconciler.ConfigMapReconciler{Client: srv.GetClient(), Scheme: srv.GetScheme()}
	srv.AddReconcilerSetup(r.SetupWithManager)

	// Added, Updated and Deleted events become srv.Add, srv.Update and
	// srv.Delete; problems with one object are logged, naming it, and the
	// rest of the fleet carries on. The server stops the watcher when
	// Start returns.
	srv.Watch(watcher)

	if err := srv.GetHostManager().AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up health check")
		os.Exit(1)
	}
	if err := srv.GetHostManager().AddReadyzCheck("readyz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up ready check")
		os.Exit(1)
	}

	setupLog.Info("starting server", "source", sf.source)
	if err := srv.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "problem running server")
		os.Exit(1)
	}
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

// newLogger logs through log/slog, which needs nothing beyond the standard
// library; any logr.Logger works (kubebuilder's zap setup too).
func newLogger(jsonLogs bool, verbosity int) logr.Logger {
	opts := &slog.HandlerOptions{Level: slog.Level(-verbosity)}
	if jsonLogs {
		return logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, opts))
	}
	return logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, opts))
}
