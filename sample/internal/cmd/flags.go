package cmd

import (
	"flag"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Flags are the command-line flags every sample has: where the host
// Manager serves metrics and probes, leader election on the host cluster,
// and logging. --kubeconfig, the host cluster, is controller-runtime's
// own flag.
type Flags struct {
	MetricsAddr             string
	ProbeAddr               string
	LeaderElection          bool
	LeaderElectionNamespace string
	JSONLogs                bool
	Verbosity               int
}

// Register adds --metrics-bind-address, --health-probe-bind-address,
// --log-json and --verbosity to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.MetricsAddr, "metrics-bind-address", "0",
		"The address the metrics endpoint binds to, e.g. :8080. 0 disables it.")
	fs.StringVar(&f.ProbeAddr, "health-probe-bind-address", ":8081",
		"The address the health probe endpoint binds to.")
	fs.BoolVar(&f.JSONLogs, "log-json", false, "Log JSON lines instead of text.")
	fs.IntVar(&f.Verbosity, "verbosity", 0, "Log verbosity: 0 logs what matters, higher logs more.")
}

// RegisterLeaderElection adds --leader-elect and
// --leader-election-namespace to fs. leaderElected says what only one
// replica does at a time while leader election is on, e.g. "runs the
// members".
func (f *Flags) RegisterLeaderElection(fs *flag.FlagSet, leaderElected string) {
	fs.BoolVar(&f.LeaderElection, "leader-elect", false,
		"Enable leader election on the host cluster, so that only one replica "+leaderElected+" at a time.")
	fs.StringVar(&f.LeaderElectionNamespace, "leader-election-namespace", "",
		"Namespace of the leader election Lease on the host cluster (required out of cluster).")
}

// ParseFlags registers the shared flags on flag.CommandLine, where the
// program has registered its own, with --leader-elect and
// --leader-election-namespace; parses the command line; and sets
// controller-runtime's logger as --log-json and --verbosity say.
// leaderElected says what only one replica does at a time while
// --leader-elect is on, e.g. "runs the members".
func ParseFlags(leaderElected string) *Flags {
	f := &Flags{}
	f.Register(flag.CommandLine)
	f.RegisterLeaderElection(flag.CommandLine, leaderElected)
	flag.Parse()
	ctrl.SetLogger(f.Logger())
	return f
}

// Options are the host Manager's ctrl.Options the flags ask for: the
// options a single-cluster main would pass to ctrl.NewManager. The
// leader election Lease is named leaderElectionID.
func (f *Flags) Options(scheme *runtime.Scheme, leaderElectionID string) ctrl.Options {
	return ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: f.MetricsAddr},
		HealthProbeBindAddress:  f.ProbeAddr,
		LeaderElection:          f.LeaderElection,
		LeaderElectionID:        leaderElectionID,
		LeaderElectionNamespace: f.LeaderElectionNamespace,
	}
}
