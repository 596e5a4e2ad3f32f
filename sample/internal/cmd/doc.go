// Package cmd holds the start-up plumbing every sample's main shares, so
// that each main.go shows what is particular to it: how its clusters are
// found, and the mccr calls that run a reconciler in them.
//
// What is here is ordinary controller-runtime start-up, as kubebuilder
// writes it for a single cluster:
//
//   - Flags: --metrics-bind-address, --health-probe-bind-address,
//     --leader-elect, --leader-election-namespace, --log-json and
//     --verbosity (ParseFlags registers and parses them and sets the
//     logger); Options turns them into the host Manager's ctrl.Options;
//   - NewScheme: client-go's kinds, and any more;
//   - LoadClusters: the member clusters of a kubeconfig file or
//     directory, loaded once with config.LoadConfigsFromConfigFile;
//   - AddPingChecks: the healthz and readyz checks of the host Manager;
//   - SetupLog and ExitOnError: a main's own messages, and the exit when
//     it cannot go on.
//
// A program of your own can copy these few lines back into its main.
package cmd
