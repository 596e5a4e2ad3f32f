package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FleetSetting is a Setting the syncer keeps in the member clusters the
// spec selects, under the FleetSetting's own namespace and name. Its
// status tells, cluster by cluster, how far each copy is.
type FleetSetting struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FleetSettingSpec   `json:"spec,omitempty"`
	Status FleetSettingStatus `json:"status,omitempty"`
}

// FleetSettingSpec selects member clusters and says what their copy holds.
//
// A cluster is selected when Clusters names it, or when ClusterSelector
// matches its properties (what its source says about it, such as a
// ClusterProfile's status.properties). An empty selector ({}) selects
// every cluster; none selects none.
type FleetSettingSpec struct {
	// Clusters names member clusters to select, whatever their properties.
	Clusters []string `json:"clusters,omitempty"`
	// ClusterSelector selects member clusters by their properties, read as
	// labels.
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
	// Template is what each copy holds.
	Template SettingTemplate `json:"template"`
}

// SettingTemplate is the content of the copies.
type SettingTemplate struct {
	// Labels are set on each copy. Labels other controllers put on a copy
	// are left alone.
	Labels map[string]string `json:"labels,omitempty"`
	// Data is each copy's spec.data, exactly.
	Data map[string]string `json:"data,omitempty"`
}

// SyncState is how far one member's copy is.
type SyncState string

const (
	// SyncStateSynced means the member holds a copy of the current
	// generation with the template's content.
	SyncStateSynced SyncState = "Synced"
	// SyncStatePending means the member is selected and its copy is not
	// there yet, or is of an older generation.
	SyncStatePending SyncState = "Pending"
	// SyncStateOutOfSync means the copy is of the current generation but
	// its content was changed in the member; it is being restored.
	SyncStateOutOfSync SyncState = "OutOfSync"
	// SyncStateDeleting means the member holds a copy it should not (the
	// cluster is no longer selected, or the FleetSetting is being
	// deleted); it is being removed.
	SyncStateDeleting SyncState = "Deleting"
	// SyncStateConflict means an object of the same name that the syncer
	// did not make exists in the member; the syncer leaves it alone.
	SyncStateConflict SyncState = "Conflict"
	// SyncStateWaitingForCRD means the member does not serve Setting (its
	// CRD is not installed); syncing starts once it is.
	SyncStateWaitingForCRD SyncState = "WaitingForCRD"
	// SyncStateClusterNotReady means the member is not Ready (starting,
	// unreachable or failed); the message says which and why.
	SyncStateClusterNotReady SyncState = "ClusterNotReady"
)

// ClusterSync is one member's entry in a FleetSetting's status.
type ClusterSync struct {
	// Name is the member cluster's name.
	Name string `json:"name"`
	// State is how far its copy is.
	State SyncState `json:"state"`
	// ObservedGeneration is the FleetSetting generation its copy was last
	// written from.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Message says more when the state is not Synced.
	Message string `json:"message,omitempty"`
}

// FleetSettingStatus is the fleet's view of a FleetSetting.
type FleetSettingStatus struct {
	// ObservedGeneration is the generation this status was worked out for.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Selected counts the member clusters the spec selects; Synced, those
	// of them whose copy is Synced.
	Selected int32 `json:"selected"`
	Synced   int32 `json:"synced"`
	// Message reports a problem with the spec itself (an invalid selector).
	Message string `json:"message,omitempty"`
	// Clusters has an entry for every member that is selected or still
	// holds a copy, sorted by name. A member that leaves the fleet leaves
	// this list.
	Clusters []ClusterSync `json:"clusters,omitempty"`
}

// FleetSettingList is a list of FleetSettings.
type FleetSettingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FleetSetting `json:"items"`
}

// Setting is the copy of a FleetSetting in a member cluster.
type Setting struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec SettingSpec `json:"spec,omitempty"`
}

// SettingSpec is what a Setting holds.
type SettingSpec struct {
	// Data is the setting's content.
	Data map[string]string `json:"data,omitempty"`
}

// SettingList is a list of Settings.
type SettingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Setting `json:"items"`
}
