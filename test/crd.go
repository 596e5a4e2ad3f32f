package test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kubefedcrd "github.com/mccr-dev/mccr/apis/kubefed/crd"
)

// KubeFedCRDPath returns the path of a directory holding the CRD of
// KubeFedCluster (kubefedclusters.core.kubefed.io), generated from mccr's
// KubeFed types (package github.com/mccr-dev/mccr/apis/kubefed/crd). Pass
// it in Options.CRDPaths. The manifest is built into the binary and written
// on first use under the system's temporary directory, in a directory named
// after its content, so every test binary of the same mccr version shares
// one copy and none is left to clean up per run. To pass the CRD itself
// instead, use crd.KubeFedCluster in Options.CRDs.
func KubeFedCRDPath() (string, error) {
	kubeFedCRDOnce.Do(func() { kubeFedCRDDir, kubeFedCRDErr = writeKubeFedCRD() })
	return kubeFedCRDDir, kubeFedCRDErr
}

var (
	kubeFedCRDOnce sync.Once
	kubeFedCRDDir  string
	kubeFedCRDErr  error
)

func writeKubeFedCRD() (string, error) {
	raw, err := kubefedcrd.FS.ReadFile(kubefedcrd.KubeFedClusterFile)
	if err != nil {
		return "", fmt.Errorf("test: KubeFed CRD: %w", err)
	}
	sum := sha256.Sum256(raw)
	dir := filepath.Join(os.TempDir(), "mccr-kubefed-crd-"+hex.EncodeToString(sum[:8]))
	path := filepath.Join(dir, kubefedcrd.KubeFedClusterFile)
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, raw) {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("test: KubeFed CRD: %w", err)
	}
	// Written aside and renamed, so a binary running at the same time
	// never reads half a file.
	tmp, err := os.CreateTemp(dir, ".crd-*")
	if err != nil {
		return "", fmt.Errorf("test: KubeFed CRD: %w", err)
	}
	_, err = tmp.Write(raw)
	err = errors.Join(err, tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return "", fmt.Errorf("test: KubeFed CRD: %w", err)
	}
	return dir, nil
}

// InstallCRDs installs the CRD manifests found at paths (files or
// directories) into the cluster at cfg and waits until they are served.
func InstallCRDs(cfg *rest.Config, paths ...string) error {
	_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true})
	return err
}

// OpenCRD returns the CRD of a kind in group, served and stored as v1,
// whose objects may hold any fields: for tests of kinds a cluster serves
// only once the CRD is installed (late CRDs). The plural is the lower-case
// kind with an "s". Install it with InstallCRDObjects.
func OpenCRD(group, kind string, namespaced bool) *apiextensionsv1.CustomResourceDefinition {
	plural := strings.ToLower(kind) + "s"
	scope := apiextensionsv1.ClusterScoped
	if namespaced {
		scope = apiextensionsv1.NamespaceScoped
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: plural, Singular: strings.ToLower(kind), Kind: kind, ListKind: kind + "List",
			},
			Scope: scope,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		},
	}
}

// InstallCRDObjects installs crds into the cluster at cfg and waits until
// they are served.
func InstallCRDObjects(cfg *rest.Config, crds ...*apiextensionsv1.CustomResourceDefinition) error {
	_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: crds})
	return err
}
