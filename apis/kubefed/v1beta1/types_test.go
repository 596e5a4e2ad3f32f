package v1beta1

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

// A KubeFedCluster as KubeFed writes it (kubefedctl join, then its cluster
// controller's status) reads into these types and writes back unchanged:
// the JSON field names are KubeFed's.
func TestKubeFedClusterWireCompatible(t *testing.T) {
	const kubefed = `{
  "apiVersion": "core.kubefed.io/v1beta1",
  "kind": "KubeFedCluster",
  "metadata": {"name": "east", "namespace": "kube-federation-system"},
  "spec": {
    "apiEndpoint": "https://east.example:6443",
    "caBundle": "LS0tLS1CRUdJTg==",
    "secretRef": {"name": "east-x7k2p"},
    "disabledTLSValidations": ["SubjectName", "ValidityPeriod"],
    "proxyURL": "http://proxy.example:3128"
  },
  "status": {
    "conditions": [{
      "type": "Ready",
      "status": "True",
      "lastProbeTime": "2024-05-01T10:00:00Z",
      "lastTransitionTime": "2024-05-01T09:00:00Z",
      "reason": "ClusterReady",
      "message": "/healthz responded with ok"
    }],
    "kubernetesVersion": "v1.37.1",
    "zones": ["a", "b"],
    "region": "eu"
  }
}`
	var kfc KubeFedCluster
	dec := json.NewDecoder(strings.NewReader(kubefed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&kfc); err != nil {
		t.Fatalf("a KubeFed object has fields these types lack: %v", err)
	}
	if kfc.Spec.SecretRef.Name != "east-x7k2p" || kfc.Status.Conditions[0].Type != ClusterReady ||
		kfc.Spec.DisabledTLSValidations[1] != TLSValidityPeriod {
		t.Fatalf("decoded wrong: %+v", kfc)
	}
	out, err := json.Marshal(&kfc)
	if err != nil {
		t.Fatal(err)
	}
	var want, got map[string]any
	if err := json.Unmarshal([]byte(kubefed), &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	delete(got["metadata"].(map[string]any), "creationTimestamp")
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("round trip changed the object:\nwant %v\ngot  %v", want, got)
	}

	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	gvks, _, err := s.ObjectKinds(&KubeFedCluster{})
	if err != nil || len(gvks) != 1 || gvks[0] != GroupVersion.WithKind("KubeFedCluster") {
		t.Fatalf("scheme kinds: %v, %v", gvks, err)
	}
	if c := kfc.DeepCopy(); !reflect.DeepEqual(c, &kfc) || &c.Status.Conditions[0] == &kfc.Status.Conditions[0] {
		t.Fatal("DeepCopy is not a deep copy")
	}
}
