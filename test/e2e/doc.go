// Package e2e holds mccr's end-to-end suites: faults (members killed,
// unreachable, credentials rotated or revoked, churn), security checks on
// what mccr logs, and the fleet-scale benchmarks (BenchmarkFleet: an mccr
// Server and a plain controller-runtime Manager per cluster, each run in a
// process of its own, with every cluster behind a loopback endpoint of its
// own). They run against real API servers started with the test kit;
// `go test -short` skips the slow parts.
package e2e
