// Command sharded runs one ordinary controller-runtime reconciler in every
// cluster of a kubeconfig file or directory, split among several replicas
// of this same program (server.WithSharding): each cluster runs on exactly
// one live replica at a time, a replica stopped gracefully hands its
// clusters over before it exits, one that dies loses them a lease duration
// after it was last heard from, and one that joins takes about its share.
//
// Start the same command several times, each with its own identity:
//
//	go run ./sample/sharded --kubeconfig host.kubeconfig --clusters ./members/ --shard-identity r1
//	go run ./sample/sharded --kubeconfig host.kubeconfig --clusters ./members/ --shard-identity r2
//
// --kubeconfig (controller-runtime's own flag, or $KUBECONFIG, or the
// in-cluster config) is the host cluster: it holds the replicas' Leases in
// --shard-namespace, labelled with --shard-group. --clusters is a kubeconfig
// file or a directory of them; every context is a member. --lease-duration,
// --renew-deadline and --retry-period tune how fast a dead replica's
// clusters move; --pin cluster=replica (repeatable) keeps a cluster on a
// replica whenever that replica is live. mccr_shard_clusters_owned on
// --metrics-bind-address says how many clusters each replica runs.
//
// Besides the reconciler, each member Manager runs a witness: it logs
// "witness start" when the Manager of a cluster starts on this replica and
// "witness stop" when it is told to stop, each with the cluster, the
// replica and the time in Unix nanoseconds. Gathered from every replica on
// one machine, these lines tell which replica ran each cluster when, and
// that no two ever ran one at once.
//
// With --namespace-per-cluster each cluster reconciles only the namespace
// named like it: a fleet of many cluster names on a few API servers (as in
// this package's tests) then gives each name objects of its own.
//
// SIGINT or SIGTERM hands this replica's clusters over, stops it and exits
// 0.
package main
