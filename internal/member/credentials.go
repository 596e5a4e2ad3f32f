package member

import "k8s.io/client-go/rest"

// GetConfig returns the member's config naming the credentials it sends
// now: a member whose token was rotated in place (credential.Holder.Set)
// tells the new one, as a member restarted on it would. Each call returns
// a copy; clients built from it send the member's current credentials
// whatever it names, as the member's own do.
func (m *Manager) GetConfig() *rest.Config {
	if m.creds == nil {
		return m.Cluster.GetConfig()
	}
	return m.creds.Config(m.Cluster.GetConfig())
}
