// Package configwatcher feeds a Server the clusters of a fleet as they come
// and go.
//
// A ConfigWatcher turns some source of cluster configs into Added, Updated and
// Deleted events. These come with mccr:
//
//   - FileWatcher watches a kubeconfig file or a directory of them (a mounted
//     Secret or ConfigMap, say) and emits one event per context that changed.
//   - KubeFedWatcher watches KubeFedCluster objects and the Secrets they
//     reference on a host cluster.
//   - SecretWatcher watches cluster Secrets on a host cluster, in the
//     format of multicluster-runtime's kubeconfig provider or, with
//     ArgoCDFormat, of Argo CD, so that a fleet registered for either works
//     as it is (but for Argo CD's implicit "in-cluster" cluster, which the
//     watcher does not add: see SecretWatcher). A Secret's credentials must
//     be inline (no file paths), and those that run programs need
//     AllowAuthPlugins.
//   - ClusterAPIWatcher watches the Cluster objects of a Cluster API
//     management cluster (v1beta2, or v1beta1 where only that is served)
//     and adds each workload cluster once its control plane is initialized,
//     reached with the kubeconfig Secret Cluster API writes for it and
//     named "<namespace>/<name>".
//   - ClusterProfileWatcher watches the ClusterProfiles of a Cluster
//     Inventory (KEP-4322) and adds each cluster once its cluster manager
//     reports it healthy, named after its
//     multicluster.x-k8s.io/inventory-member-id label (profiles sharing
//     one are one member) or else "<namespace>/<name>", with the profile's
//     properties, and reached through the exec plugin that the operator's
//     access-providers file names for one of its access providers.
//
// The files of a watched directory are untrusted input: whoever can write
// the directory must not be able to make the controller read files outside
// it, run programs, or take over a cluster another file already serves.
// FileWatcher applies the rules of package config (see FileWatcher and
// docs/security.md); WithLoadOptions, AllowAuthPlugins and
// AllowFileReferences lift them for trusted places.
//
// Server.Watch applies a watcher's events to a Server; a hand-written loop
// over Events and Errors, as older multi-cluster libraries required, works
// too. Any other source (a database, say) fits behind the same small
// interface; package test/watchertest checks a watcher of your own the
// way every built-in watcher is checked.
//
// Options are typed by the watchers that take them: WithLogger is
// accepted by every constructor, AllowAuthPlugins by the file, Secret
// and Cluster API watchers, WithDebounce, WithLoadOptions and
// AllowFileReferences by NewFileWatcher alone, so an option a watcher
// does not take is a compile error rather than a run-time one.
package configwatcher
