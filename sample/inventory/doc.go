// Command inventory runs one ordinary controller-runtime reconciler in
// every cluster of an inventory kept on the host cluster, and follows it
// while it runs: clusters joining, credentials rotating, clusters leaving.
// --source picks the inventory:
//
//   - secrets: multicluster-runtime's kubeconfig Secrets — labelled
//     sigs.k8s.io/multicluster-runtime-kubeconfig=true, a kubeconfig under
//     data key "kubeconfig", the cluster named after the Secret (namespace
//     "default" unless --namespace).
//   - argocd: Argo CD's declarative cluster Secrets — labelled
//     argocd.argoproj.io/secret-type=cluster, data "name", "server" and
//     "config" (namespace "argocd" unless --namespace).
//   - cluster-api: Cluster API Clusters (cluster.x-k8s.io v1beta2, or
//     v1beta1), each once its control plane is initialized (or Available,
//     with --require-available), reached with the kubeconfig in Secret
//     <name>-kubeconfig, key "value"; named <namespace>/<name>.
//   - cluster-profiles: the Cluster Inventory API's ClusterProfiles
//     (multicluster.x-k8s.io/v1alpha1), each once ControlPlaneHealthy,
//     reached through the credential plugin that --access-providers-file
//     names for one of the profile's access providers; named
//     <namespace>/<name>, its status.properties readable by reconcilers.
//
// Only the watcher differs from sample/kubefed:
//
//	go run ./sample/inventory --kubeconfig host.kubeconfig --source secrets
//	go run ./sample/inventory --kubeconfig host.kubeconfig --source cluster-api --namespace fleet
//	go run ./sample/inventory --kubeconfig host.kubeconfig --source cluster-profiles --access-providers-file providers.json
//
// The program needs list and watch on those objects (and on the Secrets
// they name) in the namespaces it reads. Credentials that run a program
// are refused in Secrets unless --allow-auth-plugins; a ClusterProfile's
// plugin comes from the operator's providers file, never from the object.
// SIGINT or SIGTERM stops the watcher and every member and exits 0.
package main
