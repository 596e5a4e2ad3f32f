// Package namefuzz fuzzes the cluster names a server.Server takes through
// its public entry point, Server.Add, on a Server whose host and members
// are fake API servers (internal/fakeapi). Its only content is that fuzz
// target: it lives apart from package server's own tests because their
// TestMain starts a fleet of real API servers, and every fuzzing process
// runs TestMain.
package namefuzz
