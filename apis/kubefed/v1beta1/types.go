package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TLSValidation names a check of the member's TLS certificate that a
// KubeFedCluster may turn off.
type TLSValidation string

const (
	// TLSAll turns off every check; it is meant to be the only entry.
	TLSAll TLSValidation = "*"
	// TLSSubjectName skips the check that the certificate names the host.
	TLSSubjectName TLSValidation = "SubjectName"
	// TLSValidityPeriod accepts a certificate outside its validity period.
	TLSValidityPeriod TLSValidation = "ValidityPeriod"
)

// ClusterConditionType is the type of a KubeFedCluster's condition.
type ClusterConditionType string

const (
	// ClusterReady is True while KubeFed's health check finds the member
	// ready.
	ClusterReady ClusterConditionType = "Ready"
	// ClusterOffline is True while KubeFed cannot reach the member.
	ClusterOffline ClusterConditionType = "Offline"
	// ClusterConfigMalformed is True when KubeFed cannot make a client
	// from the KubeFedCluster.
	ClusterConfigMalformed ClusterConditionType = "ConfigMalformed"
)

// KubeFedClusterSpec says where a member cluster is and how to reach it.
type KubeFedClusterSpec struct {
	// APIEndpoint is the member's API server: a URL, or a hostname,
	// hostname:port, IP or IP:port.
	APIEndpoint string `json:"apiEndpoint"`

	// CABundle holds the PEM certificates of the CAs that sign the
	// member's serving certificate.
	// +optional
	CABundle []byte `json:"caBundle,omitempty"`

	// SecretRef names the Secret, in the KubeFedCluster's namespace, whose
	// "token" key holds the bearer token for the member.
	SecretRef LocalSecretReference `json:"secretRef"`

	// DisabledTLSValidations lists the checks of the member's certificate
	// to skip: "*", "SubjectName" and/or "ValidityPeriod". "*" is meant
	// to be alone.
	// +optional
	DisabledTLSValidations []TLSValidation `json:"disabledTLSValidations,omitempty"`

	// ProxyURL is the proxy every request to the member goes through.
	// +optional
	ProxyURL string `json:"proxyURL"`
}

// LocalSecretReference names a Secret in the namespace of the object
// that holds the reference.
type LocalSecretReference struct {
	// Name of the Secret.
	Name string `json:"name"`
}

// KubeFedClusterStatus is what KubeFed's cluster controller last found out
// about the member.
type KubeFedClusterStatus struct {
	// Conditions of the member: Ready, Offline, ConfigMalformed.
	Conditions []ClusterCondition `json:"conditions"`
	// KubernetesVersion is the member's Kubernetes git version.
	// +optional
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// Zones are the availability zones of the member's nodes.
	// +optional
	Zones []string `json:"zones,omitempty"`
	// Region is the region all of the member's nodes are in.
	// +optional
	Region *string `json:"region,omitempty"`
}

// ClusterCondition is one observation about a member cluster.
type ClusterCondition struct {
	// Type of the condition.
	Type ClusterConditionType `json:"type"`
	// Status of the condition: True, False or Unknown.
	Status corev1.ConditionStatus `json:"status"`
	// LastProbeTime is when the condition was last checked.
	LastProbeTime metav1.Time `json:"lastProbeTime"`
	// LastTransitionTime is when Status last changed.
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
	// Reason is a one-word reason for the last transition.
	// +optional
	Reason *string `json:"reason,omitempty"`
	// Message tells about the last transition in words.
	// +optional
	Message *string `json:"message,omitempty"`
}

// KubeFedCluster is a member cluster joined to KubeFed: where its API
// server is, and the Secret with the credentials to reach it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=kubefedclusters,shortName=kfc
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name=age,type=date,JSONPath=.metadata.creationTimestamp
// +kubebuilder:printcolumn:name=ready,type=string,JSONPath=.status.conditions[?(@.type=='Ready')].status
// +kubebuilder:printcolumn:name=kubernetes-version,type=string,JSONPath=.status.kubernetesVersion
type KubeFedCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec KubeFedClusterSpec `json:"spec"`
	// +optional
	Status KubeFedClusterStatus `json:"status,omitempty"`
}

// KubeFedClusterList is a list of KubeFedClusters.
//
// +kubebuilder:object:root=true
type KubeFedClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KubeFedCluster `json:"items"`
}
