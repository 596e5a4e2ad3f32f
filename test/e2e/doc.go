// Package e2e holds mccr's end-to-end suites: faults (members killed,
// unreachable, credentials rotated or revoked, churn), security checks on
// what mccr logs, and the fleet-scale benchmark. They run against real API
// servers started with the test kit; `go test -short` skips the slow parts.
package e2e
