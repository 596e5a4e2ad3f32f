package test

import (
	"net"
	"testing"
)

// FreeAddress returns a loopback address ("127.0.0.1:port") whose port was
// free a moment ago, for a server whose address the test must know before
// it starts: a metrics endpoint given to ctrl.Options, say. Another process
// may take the port in between, rarely; a server that can be handed a
// listener should be given one instead.
func FreeAddress(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		tb.Fatal(err)
	}
	return addr
}
