package server

import "testing"

// SetInClusterNamespaceFile makes Servers created from now until the test
// ends read the namespace of the Pod they run in from path.
func SetInClusterNamespaceFile(t testing.TB, path string) {
	old := inClusterNamespaceFile
	inClusterNamespaceFile = path
	t.Cleanup(func() { inClusterNamespaceFile = old })
}

// ShardingNamespace is the namespace of s's Leases.
func ShardingNamespace(s *Server) string { return s.env.opts.Sharding.Namespace }
