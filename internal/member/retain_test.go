package member

import (
	"runtime"
	"testing"
	"weak"

	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/mccr-dev/mccr/internal/fakeapi"
)

// TestBuildKeepsNoOptions: what a Build's options hold for the build alone
// (the Cluster function and what it captures: a Server's start check
// passes the core resource list that way) is garbage once Build returns,
// while the member lives on. Each of a fleet's members would otherwise
// keep its own copy for as long as it runs.
func TestBuildKeepsNoOptions(t *testing.T) {
	s := newFake(t)
	m, held := buildHolding(t, s)
	runtime.GC()
	if held.Value() != nil {
		t.Error("the member keeps what its build options' Cluster function captured")
	}
	runtime.KeepAlive(m)
}

// buildHolding builds a member whose Cluster option captures a buffer, and
// returns the member and a weak pointer to the buffer.
func buildHolding(t *testing.T, s *fakeapi.Server) (*Manager, weak.Pointer[[16 << 10]byte]) {
	t.Helper()
	buf := new([16 << 10]byte)
	m := buildOn(t, s.Config(), BuildOptions{Cluster: func(*cluster.Options) { buf[0]++ }})
	return m, weak.Make(buf)
}
