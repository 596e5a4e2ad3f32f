// Package e2e holds mccr's end-to-end suites: faults (members killed,
// unreachable, credentials rotated or revoked, churn), security checks on
// what mccr logs, and the fleet-scale benchmarks (BenchmarkFleet: an mccr
// Server and a plain controller-runtime Manager per cluster, each run in a
// process of its own, with every cluster behind a loopback endpoint of its
// own, at one and at ten watched kinds; BenchmarkFakeFleet: 1,000 and
// 10,000 clusters of fake API servers in helper processes;
// BenchmarkNoisyNeighbour: one cluster's change during another's burst of
// updates; BenchmarkSlowNetwork: 50 ms added to every member's round
// trip). They run against real API servers started with the test kit;
// `go test -short` skips the slow parts.
package e2e
