package client

import (
	"errors"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
)

type mapperFleet struct{ members []Member }

func (f mapperFleet) Route(name string) (Member, error) { return Member{}, NotFound(name) }
func (f mapperFleet) Members() []Member                 { return f.members }

// mapperClient is a member's client as far as the fleet mapper sees it.
type mapperClient struct {
	crclient.Client
	mapper meta.RESTMapper
}

func (c mapperClient) RESTMapper() meta.RESTMapper { return c.mapper }

// countingMapper counts what it is asked; a member whose API server is
// down would wait for its discovery's timeout.
type countingMapper struct {
	meta.RESTMapper
	asked *atomic.Int32
}

func (m countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	m.asked.Add(1)
	return m.RESTMapper.RESTMapping(gk, versions...)
}

// The fleet mapper answers from the first mapper when it can; on its
// no-match, from the first Ready member (in name order) that maps the
// kind, never asking a member not Ready or marked unreachable; and with
// the first mapper's no-match when none does.
func TestFleetMapper(t *testing.T) {
	widget := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	configMap := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	host := meta.NewDefaultRESTMapper(nil)
	host.Add(configMap, meta.RESTScopeNamespace)
	serves := meta.NewDefaultRESTMapper(nil)
	serves.Add(widget, meta.RESTScopeRoot)
	var down, notReady, asked atomic.Int32
	member := func(name string, mapper meta.RESTMapper, counter *atomic.Int32, err error) Member {
		return Member{Name: name, Client: mapperClient{mapper: countingMapper{RESTMapper: mapper, asked: counter}}, Err: err}
	}
	m := fleetMapper{first: host, fleet: mapperFleet{members: []Member{
		member("a-down", serves, &down, Unreachable("a-down", errors.New("probe failed"))),
		member("b-starting", serves, &notReady, errors.Join(ErrClusterNotReady)),
		{Name: "c-not-running"},
		member("d", meta.NewDefaultRESTMapper(nil), &asked, nil),
		member("e", serves, &asked, nil),
	}}}

	if got, err := m.RESTMapping(configMap.GroupKind(), "v1"); err != nil || got.Scope != meta.RESTScopeNamespace || asked.Load() != 0 {
		t.Fatalf("a kind the host maps: %v, %v, members asked %d times", got, err, asked.Load())
	}
	got, err := m.RESTMapping(widget.GroupKind(), "v1")
	if err != nil || got.Scope != meta.RESTScopeRoot {
		t.Fatalf("a kind member e maps: %v, %v", got, err)
	}
	if down.Load() != 0 || notReady.Load() != 0 || asked.Load() != 2 {
		t.Errorf("asked: unreachable %d, not Ready %d, Ready d and e %d times; want 0, 0, 2", down.Load(), notReady.Load(), asked.Load())
	}
	gadget := widget.GroupVersion().WithKind("Gadget")
	if _, err := m.RESTMapping(gadget.GroupKind(), "v1"); !meta.IsNoMatchError(err) {
		t.Errorf("a kind nobody maps: %v, want a no-match", err)
	}
}
