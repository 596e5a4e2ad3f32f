package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/sample/internal/cmd"
	"github.com/mccr-dev/mccr/sample/internal/reconciler"
	"github.com/mccr-dev/mccr/server"
)

func main() {
	var clustersPath string
	var namespacePerCluster bool
	var sh server.ShardingOptions
	var shutdown time.Duration
	pins := map[string]string{}
	flag.StringVar(&clustersPath, "clusters", "",
		"A kubeconfig file, or a directory of them: every context is a member cluster. "+
			"(--kubeconfig, as in any controller-runtime program, is the host cluster.)")
	flag.StringVar(&sh.Identity, "shard-identity", os.Getenv("POD_NAME"),
		"This replica's name, unique among the replicas and new for each process. "+
			"Defaults to $POD_NAME, else the host name and a random suffix.")
	flag.StringVar(&sh.Namespace, "shard-namespace", "",
		`Namespace of the replicas' Leases on the host cluster. Defaults to --leader-election-namespace, else the Pod's own namespace.`)
	flag.StringVar(&sh.Group, "shard-group", "sharded.sample.mccr.dev",
		"Names the replicas that share the fleet.")
	flag.DurationVar(&sh.LeaseDuration, "lease-duration", 15*time.Second,
		"How long a replica that stopped renewing still counts as live.")
	flag.DurationVar(&sh.RenewDeadline, "renew-deadline", 10*time.Second,
		"How long a replica keeps its clusters while it cannot renew its Lease.")
	flag.DurationVar(&sh.RetryPeriod, "retry-period", 2*time.Second,
		"How often a replica renews its Lease.")
	flag.DurationVar(&shutdown, "graceful-shutdown-timeout", 3*time.Second,
		"How long a member's controllers get to stop; must be under --lease-duration minus --renew-deadline.")
	flag.Func("pin", "cluster=replica: run the cluster on that replica whenever it is live (repeatable).",
		func(s string) error {
			cluster, replica, ok := strings.Cut(s, "=")
			if !ok || cluster == "" || replica == "" {
				return fmt.Errorf("want cluster=replica, got %q", s)
			}
			pins[cluster] = replica
			return nil
		})
	flag.BoolVar(&namespacePerCluster, "namespace-per-cluster", false,
		"Reconcile, in each cluster, only the namespace named like the cluster.")
	// With the flags every sample has but leader election, whose place
	// sharding takes (every replica runs, each its share of the fleet):
	// --metrics-bind-address, --health-probe-bind-address, --log-json and
	// --verbosity.
	var common cmd.Flags
	common.Register(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(common.Logger())

	// Every context of --clusters is a member (config.LoadConfigsFromConfigFile).
	configs := cmd.LoadClusters(clustersPath)

	if sh.Identity == "" {
		// The witness names the replica, so the identity is chosen here
		// rather than left to the Server's default.
		sh.Identity = defaultIdentity()
	}
	sh.Pins = pins

	opts := common.Options(cmd.NewScheme(), "") // no leader election, so no Lease name
	opts.GracefulShutdownTimeout = &shutdown
	srv, err := server.NewServer(ctrl.GetConfigOrDie(), opts, server.WithSharding(sh))
	cmd.ExitOnError(err, "unable to create server")
	for _, cfg := range configs {
		cmd.ExitOnError(srv.Add(cfg), "unable to add cluster", "cluster", cfg.Name)
	}

	r := &reconciler.ConfigMapReconciler{Client: srv.GetClient(), Scheme: srv.GetScheme()}
	if namespacePerCluster {
		srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
			return ctrl.NewControllerManagedBy(mgr).
				For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
					return o.GetLabels()[reconciler.EnabledLabel] == "true"
				}))).
				Named("configmap").
				Complete(clusterNamespace{r})
		})
	} else {
		srv.AddReconcilerSetup(r.SetupWithManager)
	}
	witnessLog := ctrl.Log.WithName("witness")
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return mgr.Add(witness{log: witnessLog, replica: sh.Identity})
	})

	cmd.AddPingChecks(srv)
	// Not ready while another process runs with this replica's identity (a
	// copied Deployment): that replica runs no cluster until it is alone.
	cmd.ExitOnError(srv.AddReadyzCheck("sharding", srv.ShardingReadyCheck()), "unable to set up ready check")

	cmd.SetupLog.Info("starting server", "replica", sh.Identity, "clusters", len(configs))
	cmd.ExitOnError(srv.Start(ctrl.SetupSignalHandler()), "problem running server")
	cmd.SetupLog.Info("stopped", "replica", sh.Identity)
}

// witness runs in every member Manager and logs when this replica starts
// and stops running the cluster, with times comparable across processes
// on one machine.
type witness struct {
	log     logr.Logger
	replica string
}

var _ manager.Runnable = witness{}

func (w witness) Start(ctx context.Context) error {
	cluster, _ := known.ClusterFrom(ctx)
	w.log.Info("witness start", "cluster", cluster, "replica", w.replica, "unixNano", time.Now().UnixNano())
	<-ctx.Done()
	// The time is taken as the Manager is told to stop, before it has: the
	// next replica may start the cluster only after that.
	w.log.Info("witness stop", "cluster", cluster, "replica", w.replica, "unixNano", time.Now().UnixNano())
	return nil
}

// clusterNamespace passes on only the requests in the namespace named
// like the cluster.
type clusterNamespace struct{ reconcile.Reconciler }

func (c clusterNamespace) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if cluster, _ := known.ClusterFrom(ctx); req.Namespace != cluster {
		return ctrl.Result{}, nil
	}
	return c.Reconciler.Reconcile(ctx, req)
}

// defaultIdentity is the host name and a random suffix: new for each
// process, as the Server's own default.
func defaultIdentity() string {
	host, _ := os.Hostname()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix) // crypto/rand never fails
	return host + "_" + hex.EncodeToString(suffix)
}
