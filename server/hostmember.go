package server

import (
	"fmt"

	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/config"
)

// asHost is the source of the name Options.HostMember gives the host
// cluster: nothing but the Server itself feeds it, and nothing takes it.
const asHost = -2

// hostMemberSource is where the host member's config comes from, as Status
// and messages name it.
var hostMemberSource = config.Source{Object: "the host cluster (Options.HostMember)"}

// addHostMember makes the host cluster a member named name, with the host
// Manager's config (a copy: the member's client must not share the host
// Manager's rate limiter or transport settings by accident). The name is
// the Server's own from then on: Add, Update and Delete of it, and a
// watcher's event for it, are refused with ErrClusterNameTaken.
func (s *Server) addHostMember(name string, cfg *rest.Config) error {
	own := rest.CopyConfig(cfg)
	own.RateLimiter = nil // CopyConfig shares it: the member limits itself by QPS and Burst (or MemberQPS)
	nc := &config.NamedConfig{Name: name, Config: own, Source: hostMemberSource}
	if err := validate(nc); err != nil {
		return fmt.Errorf("Options.HostMember: %w", err)
	}
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	if err := s.add(nc); err != nil {
		return fmt.Errorf("Options.HostMember: %w", err)
	}
	s.claims.own(name, claim{from: asHost, cfg: nc})
	return nil
}
