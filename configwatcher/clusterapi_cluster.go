package configwatcher

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// What the watcher reads of Cluster API's formats. Facts of Cluster API,
// spelled here so that mccr needs none of its modules.
const (
	clusterAPIGroup = "cluster.x-k8s.io"
	clusterAPIKind  = "Cluster"

	// clusterAPIKubeconfigSuffix and clusterAPIKubeconfigKey: the Secret
	// <cluster>-kubeconfig holds the kubeconfig under "value".
	clusterAPIKubeconfigSuffix = "-kubeconfig"
	clusterAPIKubeconfigKey    = "value"

	// Condition types, alike in v1beta2's status.conditions and v1beta1's
	// status.conditions (Cluster API's own condition type) and
	// status.v1beta2.conditions.
	clusterAPIControlPlaneInitialized = "ControlPlaneInitialized"
	clusterAPIAvailable               = "Available"
	clusterAPIReady                   = "Ready" // v1beta1 only
)

// clusterAPIVersions are the Cluster versions the watcher reads, the one it
// prefers first.
var clusterAPIVersions = []string{"v1beta2", "v1beta1"}

func clusterAPIGroupVersion(version string) schema.GroupVersion {
	return schema.GroupVersion{Group: clusterAPIGroup, Version: version}
}

// resolveCluster chooses the Cluster version to watch among those the host
// serves, and returns the object to watch it with.
func (w *ClusterAPIWatcher) resolveCluster(m meta.RESTMapper) (client.Object, error) {
	mappings, err := m.RESTMappings(schema.GroupKind{Group: clusterAPIGroup, Kind: clusterAPIKind})
	if err != nil {
		return nil, err
	}
	served := make([]string, 0, len(mappings))
	for _, mp := range mappings {
		served = append(served, mp.GroupVersionKind.Version)
	}
	i := slices.IndexFunc(clusterAPIVersions, func(v string) bool { return slices.Contains(served, v) })
	if i < 0 {
		slices.Sort(served)
		return nil, fmt.Errorf("%w: the host serves Cluster in %s only", ErrClusterAPINotInstalled, strings.Join(served, ", "))
	}
	w.version = clusterAPIVersions[i]
	w.log.Info("reading Cluster API Clusters", "version", w.version)
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(clusterAPIGroupVersion(w.version).WithKind(clusterAPIKind))
	return u, nil
}

// clusterAPICluster is what the watcher reads of a Cluster, in either
// version: fields of the same name mean the same in both.
type clusterAPICluster struct {
	Status clusterAPIClusterStatus `json:"status"`
}

type clusterAPIClusterStatus struct {
	// Initialization is v1beta2's.
	Initialization struct {
		ControlPlaneInitialized *bool `json:"controlPlaneInitialized,omitempty"`
	} `json:"initialization"`
	// ControlPlaneReady and V1Beta2 are v1beta1's: ControlPlaneReady is set
	// once, when the control plane is initialized; V1Beta2 holds the
	// conditions of v1beta2 (Available among them) from Cluster API v1.9.
	ControlPlaneReady bool `json:"controlPlaneReady"`
	V1Beta2           *struct {
		Conditions []clusterAPICondition `json:"conditions"`
	} `json:"v1beta2,omitempty"`
	// Conditions are metav1.Conditions in v1beta2 and Cluster API's own in
	// v1beta1; type and status read alike.
	Conditions []clusterAPICondition `json:"conditions"`
}

type clusterAPICondition struct {
	Type   string                 `json:"type"`
	Status metav1.ConditionStatus `json:"status"`
}

// ErrClusterAPIClusterInvalid means a Cluster's status does not read as
// Cluster API's (a field the watcher reads holds a value of another type):
// the host's schema should prevent it, and the watcher does not rely on
// it.
var ErrClusterAPIClusterInvalid = errors.New("invalid Cluster API Cluster")

func readClusterAPICluster(u *unstructured.Unstructured) (*clusterAPICluster, error) {
	var cl clusterAPICluster
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &cl); err != nil {
		return nil, fmt.Errorf("%w: status does not read as Cluster API's: %w", ErrClusterAPIClusterInvalid, err)
	}
	return &cl, nil
}

// ready says whether the Cluster may join the fleet: its control plane is
// initialized or, with available, its Available condition is True.
func (cl *clusterAPICluster) ready(version string, available bool) bool {
	st := &cl.Status
	var v1beta2Conditions []clusterAPICondition
	if st.V1Beta2 != nil {
		v1beta2Conditions = st.V1Beta2.Conditions
	}
	if version == "v1beta2" {
		if available {
			return conditionTrue(st.Conditions, clusterAPIAvailable)
		}
		return ptrTrue(st.Initialization.ControlPlaneInitialized) || conditionTrue(st.Conditions, clusterAPIControlPlaneInitialized)
	}
	if available {
		if len(v1beta2Conditions) == 0 {
			// Cluster API before v1.9: no Available condition; Ready
			// summarizes the Cluster's state.
			return conditionTrue(st.Conditions, clusterAPIReady)
		}
		return conditionTrue(v1beta2Conditions, clusterAPIAvailable)
	}
	return st.ControlPlaneReady || conditionTrue(st.Conditions, clusterAPIControlPlaneInitialized) ||
		conditionTrue(v1beta2Conditions, clusterAPIControlPlaneInitialized)
}

func conditionTrue(conds []clusterAPICondition, typ string) bool {
	i := slices.IndexFunc(conds, func(c clusterAPICondition) bool { return c.Type == typ })
	return i >= 0 && conds[i].Status == metav1.ConditionTrue
}

func ptrTrue(b *bool) bool { return b != nil && *b }

// clusterAPITransform trims objects before they enter the cache. Clusters
// keep their metadata (without managed fields and annotations; labels stay,
// they are the cluster's Properties) and the status fields the watcher reads, conditions reduced to type and
// status: a Cluster's spec (a topology with its variables, say) can be
// large. Secrets keep only the kubeconfig of kubeconfig Secrets: the other
// Secrets with Cluster API's label hold the cluster's CA and service
// account keys, which have no business in the controller's memory.
func clusterAPITransform(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
		m.SetAnnotations(nil)
	}
	switch o := obj.(type) {
	case *corev1.Secret:
		value, ok := o.Data[clusterAPIKubeconfigKey]
		o.Data, o.StringData = nil, nil
		if ok && strings.HasSuffix(o.Name, clusterAPIKubeconfigSuffix) {
			o.Data = map[string][]byte{clusterAPIKubeconfigKey: value}
		}
	case *unstructured.Unstructured:
		trimClusterAPIStatus(o.Object)
	}
	return obj, nil
}

// trimClusterAPIStatus keeps of a Cluster's content only apiVersion, kind,
// metadata and the status fields clusterAPICluster reads.
func trimClusterAPIStatus(content map[string]any) {
	status, _ := content["status"].(map[string]any)
	for k := range content {
		if k != "apiVersion" && k != "kind" && k != "metadata" {
			delete(content, k)
		}
	}
	if status == nil {
		return
	}
	kept := map[string]any{}
	if init, ok := status["initialization"].(map[string]any); ok {
		if v, ok := init["controlPlaneInitialized"]; ok {
			kept["initialization"] = map[string]any{"controlPlaneInitialized": v}
		}
	}
	if v, ok := status["controlPlaneReady"]; ok {
		kept["controlPlaneReady"] = v
	}
	if conds, ok := trimConditions(status["conditions"]); ok {
		kept["conditions"] = conds
	}
	if v1beta2, ok := status["v1beta2"].(map[string]any); ok {
		if conds, ok := trimConditions(v1beta2["conditions"]); ok {
			kept["v1beta2"] = map[string]any{"conditions": conds}
		}
	}
	content["status"] = kept
}

// trimConditions keeps type and status of each condition of a list.
// Anything but a list is kept out, and reads as no conditions.
func trimConditions(v any) ([]any, bool) {
	list, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]any, 0, len(list))
	for _, item := range list {
		c, ok := item.(map[string]any)
		if !ok {
			continue
		}
		out = append(out, map[string]any{"type": c["type"], "status": c["status"]})
	}
	return out, true
}
