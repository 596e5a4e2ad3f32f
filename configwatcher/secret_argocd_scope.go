package configwatcher

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/mccr-dev/mccr/config"
)

// Data keys of an Argo CD cluster Secret that say which part of the
// cluster Argo CD manages: "namespaces", a comma-separated list, and
// "clusterResources", "true" to manage cluster-scoped kinds with them.
const (
	argoCDNamespacesKey       = "namespaces"
	argoCDClusterResourcesKey = "clusterResources"
)

// ArgoCDSkipReconcileAnnotation on an Argo CD cluster Secret, set to a
// true value ("true", "1", "t", as strconv.ParseBool reads it, as Argo CD
// does), tells Argo CD's application controller to leave the cluster
// alone: since Argo CD 3.4 it reconciles no application of that cluster,
// which stays listed by `argocd cluster list`. A SecretWatcher reads it
// the same way: the Secret claims no cluster, so its cluster is not
// joined, or leaves (a Deleted event) if it had joined, and joins again
// once the annotation goes or says false. Any other value is ignored, as
// Argo CD ignores it. (Argo CD also reads it on Applications; the watcher
// sees cluster Secrets only.)
const ArgoCDSkipReconcileAnnotation = "argocd.argoproj.io/skip-reconcile"

// argoCDSkipped reports whether s asks to be left alone.
func argoCDSkipped(s *corev1.Secret) bool {
	skip, err := strconv.ParseBool(s.Annotations[ArgoCDSkipReconcileAnnotation])
	return err == nil && skip
}

// argoCDScope reads which part of the cluster named name an Argo CD
// cluster Secret's data lets the member watch (see config.Scope).
//
// "namespaces" is read as Argo CD reads it: split on commas, each entry
// trimmed, empty entries dropped; without any, the whole cluster. The
// namespaces are then sorted and duplicates dropped, and each must be a
// namespace name, up to config.MaxScopeNamespaces of them; Argo CD would
// list and watch in a namespace that cannot exist, and never see a thing
// there. "clusterResources" is true only as exactly "true", as in Argo CD
// ("True" is false there too); absent, cluster-scoped kinds are left out
// whenever namespaces are named, and mean nothing otherwise.
func argoCDScope(name string, data map[string][]byte) (config.Scope, error) {
	var namespaces []string
	for ns := range strings.SplitSeq(string(data[argoCDNamespacesKey]), ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			namespaces = append(namespaces, ns)
		}
	}
	scope, err := config.NewScope(namespaces, string(data[argoCDClusterResourcesKey]) == "true")
	if err == nil {
		return scope, nil
	}
	hint := ""
	if strings.Contains(string(data[argoCDNamespacesKey]), "*") {
		// `argocd cluster set --namespace '*'` means every namespace, and
		// writes no namespaces key for it.
		hint = `; every namespace is no "namespaces" key, not "*"`
	}
	return config.Scope{}, fmt.Errorf("%w: cluster %s: %q: %w%s", ErrSecretInvalid, config.QuoteName(name), argoCDNamespacesKey, err, hint)
}
