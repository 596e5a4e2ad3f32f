// Command basic runs one ordinary controller-runtime reconciler in every
// cluster listed in a kubeconfig file or directory.
//
// It is a kubebuilder-style main with two changes: ctrl.NewManager becomes
// server.NewServer, and the member clusters, loaded once at start-up with
// config.LoadConfigsFromConfigFile, are added by hand with Server.Add. The
// reconciler (package sample/internal/reconciler) is unchanged
// single-cluster code handed over with AddReconcilerSetup.
//
//	go run ./sample/basic --kubeconfig host.kubeconfig --clusters ./members/
//
// --kubeconfig (controller-runtime's own flag, or $KUBECONFIG, or the
// in-cluster config) is the host cluster: it holds the leader election
// Lease when --leader-elect is set. --clusters is a kubeconfig file or a
// directory of them; every context is a member. The set of members is
// fixed until restart: see sample/filewatcher for a fleet that changes
// while the program runs.
//
// SIGINT or SIGTERM stops every member and exits 0.
package main
