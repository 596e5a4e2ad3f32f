// Command syncer keeps copies of a host object in the member clusters it
// selects, and reports on the host how far each copy is: the pattern of a
// virtual-cluster syncer, built only from mccr's public pieces.
//
// A FleetSetting (sample.mccr.dev/v1alpha1, on the host) selects members
// by name or by their properties and holds a template; each selected
// member gets a Setting of the same namespace and name with the template's
// labels and data. Edit the FleetSetting and every copy follows; delete it
// and the copies go before it does; edit a copy by hand and it is put back.
//
//	kubectl --context host apply -f sample/syncer/crd/host/
//	kubectl --context east apply -f sample/syncer/crd/member/   # in every member
//	go run ./sample/syncer --kubeconfig host.kubeconfig --clusters ./members/
//
//	apiVersion: sample.mccr.dev/v1alpha1
//	kind: FleetSetting
//	metadata: {name: greeting, namespace: default}
//	spec:
//	  clusterSelector: {matchLabels: {env: prod}}   # or: clusters: [east, west]
//	  template:
//	    labels: {tier: gold}
//	    data: {greeting: hello}
//
// The namespace must exist in the members. clusterSelector matches what a
// member's source says about it (server.ClusterStatus.Properties): with
// --access-providers the members are a Cluster Inventory's ClusterProfiles
// and the selector matches their status.properties; kubeconfig files carry
// none, so with --clusters select by name, or every member with
// clusterSelector: {}.
//
// # Two controllers
//
// Down-sync runs in the members. The member controller (registered with
// Server.AddReconcilerSetup, so one runs in every member with the member's
// name in ctx) reconciles namespace/name keys. Its events come from the
// member's own copies, from the host's FleetSettings through
// server.HostKind (so that one change on the host reaches every member),
// and from the patroller. Reconcile reads the FleetSetting from the host's
// cache and the copy from the member's (through the fan-out client, which
// goes where ctx says), reads the member's properties with
// Server.ClusterProperties, and then writes the copy with a forced
// server-side apply, deletes it, or does nothing. Doing this in the members
// rather than in one host controller that writes into each member in turn
// gives each member its own queue, worker and retries: a slow or
// unreachable member delays no other, a member whose API server lacks the
// Setting CRD waits alone, and when a member leaves, its work stops with
// it and nothing is left to clean up on the host.
//
// Up-sync runs on the host. The host controller is the only writer of a
// FleetSetting: its finalizer and its status, with one line per member
// (Synced, Pending, OutOfSync, Deleting, Conflict, WaitingForCRD,
// ClusterNotReady) and counts of selected and synced members. It works the
// status out again when the FleetSetting changes; when a copy changes in
// any member (server.FleetKind, which adds a handler to each member's own
// informer of Setting); and when a member becomes Ready, Unreachable or
// Failed, or leaves the fleet (server.ClusterEvents), so that a member
// that leaves is gone from every status at once. It reads each member's
// copy from that member's cache and the members' phases and properties
// from Server.Statuses; a member's copy is never read from its API server.
//
// Deleting a FleetSetting: its finalizer holds it while the member
// controllers, told by HostKind, delete their copies; each deletion comes
// back through FleetKind, and once no Ready member holds a copy the host
// controller removes the finalizer. Members that are not Ready are not
// waited for: when one is Ready again, its controller's initial list
// brings each copy to Reconcile, which finds no FleetSetting and deletes
// it. A member that left the fleet is no longer the syncer's to clean.
//
// Copies are marked with the label sample.mccr.dev/managed-by=mccr-syncer;
// a Setting of the same name without it belongs to someone else, is left
// alone, and shows as Conflict. A copy records the FleetSetting generation
// it was written from (annotation sample.mccr.dev/source-generation), which
// the status reports per member. Labels that other controllers put on a
// copy are theirs; the template's labels and spec.data are the syncer's.
//
// # The patroller
//
// The member controller does not wake for every change of a copy: it
// takes changes of its spec (they change its generation) and deletions,
// and leaves out metadata updates, which other controllers in a member
// make all the time. So a label edited by hand reaches no Reconcile. Nor
// does a change of a member's properties (a Server.Update that only
// changes them keeps the member running and tells no controller), and any
// event lost on the way would be lost for good. The patroller covers all
// three: every --patrol-period, a source of each member's controller
// compares every FleetSetting with the member's copies, exactly as
// Reconcile would, and queues each key that needs work; the fix is then
// Reconcile's, one key at a time as for any event. It reads only caches,
// so it costs the API servers nothing. The host controller, for its part,
// works every status out again each period.
//
// # A member without the CRD
//
// A member that does not serve Setting is Ready all the same: mccr holds
// its syncing controller back until the CRD is installed, the member's
// Status.WaitingFor names the kind, and the FleetSetting's status says
// WaitingForCRD for it. Once the CRD is served, the controller starts
// within seconds, without a restart, and its first list of the host's
// FleetSettings brings the copies.
//
// # Flags and permissions
//
// --kubeconfig is the host (controller-runtime's flag, or $KUBECONFIG, or
// in-cluster). The members come from --clusters (a kubeconfig file or
// directory, followed while it runs) or --access-providers (the host's
// ClusterProfiles). --patrol-period (default 30s), --leader-elect,
// --leader-election-namespace, --metrics-bind-address,
// --health-probe-bind-address, --allow-auth-plugins, --log-json and
// --verbosity are as in the other samples. On the host the program needs
// to watch FleetSettings and update them and their status; in each
// member, to watch, create, patch and delete Settings.
//
// SIGINT or SIGTERM stops every member and exits 0.
package main
