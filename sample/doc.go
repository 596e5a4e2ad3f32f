// Package sample holds runnable programs, one per way of feeding clusters
// to an mccr Server, all running the same ordinary controller-runtime
// reconciler (sample/internal/reconciler):
//
//   - basic: member kubeconfigs loaded once at start-up and added by hand
//     with Server.Add;
//   - filewatcher: a kubeconfig directory followed while it runs
//     (configwatcher.NewFileWatcher and Server.Watch);
//   - kubefed: the clusters joined to KubeFed, from KubeFedCluster objects
//     on the host (configwatcher.NewKubeFedWatcher and Server.Watch);
//   - inventory: the clusters of an inventory on the host — kubeconfig
//     Secrets, Argo CD cluster Secrets, Cluster API Clusters or
//     ClusterProfiles (--source);
//   - sharded: the fleet split among replicas (server.WithSharding);
//   - syncer: controllers that span clusters — a host resource synced into
//     the members it selects, their status aggregated back (its own tests);
//   - demo: `make demo`, a guided tour on a local fleet of API servers.
//
// The tests of this package build each program and run it as a subprocess
// against real API servers: they check the work lands in every member,
// that clusters joining and leaving are followed, and that SIGTERM ends
// each program cleanly.
package sample
