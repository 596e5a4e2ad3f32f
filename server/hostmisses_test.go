package server

import (
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// countingMapper maps what it has been told to, counting the questions.
type countingMapper struct {
	meta.RESTMapper
	asked  atomic.Int64
	served atomic.Bool
}

func (m *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	m.asked.Add(1)
	if !m.served.Load() {
		return nil, &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: versions}
	}
	return &meta.RESTMapping{GroupVersionKind: gk.WithVersion(versions[0])}, nil
}

// Members waiting for a host kind the host does not serve share the host
// mapper's answer for a second: a hundred of them asking at once cost the
// host one question (one discovery request), not a hundred; once the kind
// is served, the next question after that second is asked, and answered.
func TestHostMissesAreShared(t *testing.T) {
	m := &countingMapper{}
	misses := &hostMisses{RESTMapper: m}
	gk := schema.GroupKind{Group: "example.com", Kind: "Policy"}
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			if _, err := misses.RESTMapping(gk, "v1"); !meta.IsNoMatchError(err) {
				t.Errorf("a kind the host does not serve: %v, want a no-match error", err)
			}
		})
	}
	wg.Wait()
	if n := m.asked.Load(); n != 1 {
		t.Errorf("100 members asked the host's mapper %d times within a second; want once", n)
	}
	m.served.Store(true)
	misses.mu.Lock()
	misses.missed[gk.WithVersion("v1")] = hostMiss{} // the second is over
	misses.mu.Unlock()
	if _, err := misses.RESTMapping(gk, "v1"); err != nil {
		t.Errorf("once served: %v", err)
	}
	if _, err := misses.RESTMapping(gk, "v1"); err != nil || m.asked.Load() != 3 {
		t.Errorf("a served kind is asked each time (%d questions, %v); want its answer each time", m.asked.Load(), err)
	}
}
