package test_test

import "k8s.io/apimachinery/pkg/runtime/schema"

var kubefedClusterListGVK = schema.GroupVersionKind{Group: "core.kubefed.io", Version: "v1beta1", Kind: "KubeFedClusterList"}
