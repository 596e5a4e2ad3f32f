// Package cmd holds the plumbing every sample's main shares, so that each
// main.go shows what is particular to it: how its clusters are found, and
// the mccr calls that run a reconciler in them.
//
// What is here is ordinary controller-runtime start-up, as kubebuilder
// writes it for a single cluster:
//
//   - Flags: --metrics-bind-address, --health-probe-bind-address,
//     --log-json and --verbosity, and with RegisterLeaderElection
//     --leader-elect and --leader-election-namespace; turned into the
//     host's ctrl.Options and a logr.Logger;
//   - NewScheme: client-go's kinds, and any more;
//   - AddPingChecks: the healthz and readyz checks of the host Manager;
//   - ExitOnError: log an error and exit 1, as a main does when it cannot
//     go on.
//
// A program of your own can copy these few lines back into its main.
package cmd
