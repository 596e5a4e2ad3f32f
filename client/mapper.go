package client

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// fleetMapper is the fan-out client's REST mapper: the one given in
// Options (the host's), and for a kind or resource it has no match for,
// the first running member's (Ready, or still syncing its caches), in
// name order, that has one. A kind installed in the members alone (an
// operator's CRD that its host no longer serves) is thus mapped as a
// member maps it, for callers that ask with no cluster to name:
// client.NewNamespacedClient, apiutil.IsObjectNamespaced and the like.
// Only a no-match goes on to the members; any other answer or error is
// the first mapper's. Members with no Manager running, or marked
// unreachable, are not asked. A kind that no mapper knows asks every
// running member's mapper once per call, and a member's mapper may ask
// its API server's discovery for it (mccr's members do so at most every
// few seconds for a group they did not know).
type fleetMapper struct {
	first meta.RESTMapper
	fleet Fleet
}

var _ meta.RESTMapper = fleetMapper{}

// mapWith asks m.first, then on a no-match each running member's mapper in
// turn, and returns the first answer; the first mapper's no-match when
// none has one.
func mapWith[T any](m fleetMapper, ask func(meta.RESTMapper) (T, error)) (T, error) {
	v, err := ask(m.first)
	if err == nil || !meta.IsNoMatchError(err) {
		return v, err
	}
	for _, member := range m.fleet.Members() {
		if member.Client == nil || member.Err != nil {
			continue // no running Manager, or unreachable: its discovery could hang
		}
		mapper := member.Client.RESTMapper()
		if mapper == nil {
			continue
		}
		if mv, merr := ask(mapper); merr == nil {
			return mv, nil
		}
	}
	return v, err
}

func (m fleetMapper) KindFor(resource schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	return mapWith(m, func(r meta.RESTMapper) (schema.GroupVersionKind, error) { return r.KindFor(resource) })
}

func (m fleetMapper) KindsFor(resource schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	return mapWith(m, func(r meta.RESTMapper) ([]schema.GroupVersionKind, error) { return r.KindsFor(resource) })
}

func (m fleetMapper) ResourceFor(input schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	return mapWith(m, func(r meta.RESTMapper) (schema.GroupVersionResource, error) { return r.ResourceFor(input) })
}

func (m fleetMapper) ResourcesFor(input schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	return mapWith(m, func(r meta.RESTMapper) ([]schema.GroupVersionResource, error) { return r.ResourcesFor(input) })
}

func (m fleetMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	return mapWith(m, func(r meta.RESTMapper) (*meta.RESTMapping, error) { return r.RESTMapping(gk, versions...) })
}

func (m fleetMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	return mapWith(m, func(r meta.RESTMapper) ([]*meta.RESTMapping, error) { return r.RESTMappings(gk, versions...) })
}

func (m fleetMapper) ResourceSingularizer(resource string) (string, error) {
	return mapWith(m, func(r meta.RESTMapper) (string, error) { return r.ResourceSingularizer(resource) })
}
