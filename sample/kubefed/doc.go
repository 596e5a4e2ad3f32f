// Command kubefed runs one ordinary controller-runtime reconciler in every
// cluster joined to a KubeFed control plane, and follows joins and unjoins
// while it runs.
//
// The host cluster (--kubeconfig) is KubeFed's: every KubeFedCluster in
// --kubefed-namespace (default kube-federation-system) is a member, named
// after the object, reached at spec.apiEndpoint with the CA of
// spec.caBundle and the service account token in the Secret that
// spec.secretRef names, which is what `kubefedctl join` writes. A rotated
// token restarts that member; `kubefedctl unjoin` stops it. Only
// configwatcher.NewKubeFedWatcher and Server.Watch differ from
// sample/filewatcher.
//
//	go run ./sample/kubefed --kubeconfig host.kubeconfig
//	kubefedctl join east --host-cluster-context host --cluster-context east
//
// The program needs list and watch on kubefedclusters.core.kubefed.io and
// secrets in that namespace of the host; KubeFed's own controllers need
// not run. SIGINT or SIGTERM stops the watcher and every member and exits 0.
package main
