// Package fleetsource holds the controller-runtime sources that connect the
// host and the members of a fleet, and the feed that drives them.
//
// The Server's cluster records publish each change of a member's phase to
// a Feed under their own lock; publishing never blocks, and every
// subscriber — a FleetKind or ClusterEvents source of a host controller —
// is handed the changes in a goroutine of its own. FleetKind follows the
// feed to put its handler on each running member's informer of a kind;
// ClusterEvents turns the feed into requests. HostKind and HostObject go
// the other way: a member controller watches a kind of the host, through
// the host Manager's cache.
//
// The package knows nothing of the Server: the server package hands it
// the feed, the host's cache and a logger, and keeps the public names
// (server.FleetKind, server.HostKind, server.HostObject,
// server.ClusterEvents) and their documentation.
package fleetsource
