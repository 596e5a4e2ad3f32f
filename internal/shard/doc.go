// Package shard splits a fleet of clusters among the replicas of one
// program, through Leases in one namespace of a host cluster. A replica's
// Server runs a Coordinator: it tells it the fleet's names (Members.Names)
// and receives, through Members, which clusters to run (Own) and which to
// stop (Disown); the Coordinator never calls the Server otherwise, and the
// Server never calls into it but to start it.
//
// The rules follow client-go's leader election, per replica and per
// cluster:
//
//   - Each replica renews a Lease of its own (heartbeat.go). A renewal
//     updates the version the replica last wrote; a conflict is answered
//     by reading the Lease from the API server, never from a cache, so a
//     renewal whose answer was lost costs one read, not a stale view's
//     worth of failures.
//   - Another replica is judged by what its Lease says: the duration it
//     declares, counted from when this replica saw its record change, on
//     this replica's clock. Local settings never judge another replica, so
//     replicas with different timings never run a cluster at once.
//   - Each cluster is assigned to one live replica by consistent hashing
//     with bounded loads (ring.go), a pure function of the live replicas,
//     the names, the pins and the load factor; pins and load factor count
//     only while every live replica declares the same.
//   - A replica runs a cluster only while it holds the cluster's Lease
//     (claims.go): it takes a Lease released, or whose holder's claim has
//     expired by the duration it declares; a take is an update at the
//     version seen, so of two replicas that judge at once one wins.
//   - A replica that cannot renew stops every cluster at its renew
//     deadline (the watchdog), before any other may take them.
//   - Each process marks its writes (WriterAnnotation): a replica that
//     sees another process renew its Lease (two replicas with one identity)
//     reports it and runs nothing until it is alone again.
//   - Lease names and label values hold a hash of the whole Group, and the
//     Group is compared exactly, so different Groups never share a Lease.
//
// The Leases are watched by a list-and-watch of the package's own
// (watch.go) that retries every retry period; what it delivers is merged
// with the replica's own reads and writes in a cache (cache.go) that never
// takes back a version it saw replaced.
package shard
