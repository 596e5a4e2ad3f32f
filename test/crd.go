package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

const kubefedModule = "sigs.k8s.io/kubefed"

// KubeFedCRDPath returns the path of the KubeFed CRD manifests (among them
// KubeFedCluster) shipped inside the kubefed Go module this binary was
// built with, as found in the module cache. Pass it in Options.CRDPaths.
func KubeFedCRDPath() (string, error) {
	dir, err := moduleDir(kubefedModule)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "pkg", "controller", "testdata", "fixtures", "crds.yaml")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("test: KubeFed CRDs not found in module %s: %w", dir, err)
	}
	return p, nil
}

// moduleDir finds a dependency's directory in the module cache: first from
// this binary's build information, then by asking the go command.
func moduleDir(path string) (string, error) {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path != path {
				continue
			}
			if m.Replace != nil {
				m = m.Replace
			}
			cache, err := exec.Command("go", "env", "GOMODCACHE").Output()
			if err == nil {
				dir := filepath.Join(strings.TrimSpace(string(cache)), m.Path+"@"+m.Version)
				if _, err := os.Stat(dir); err == nil {
					return dir, nil
				}
			}
		}
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", path).Output()
	if err != nil {
		return "", fmt.Errorf("test: locating module %s: %w", path, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("test: module %s is not downloaded (go mod download %s)", path, path)
	}
	return dir, nil
}

// InstallCRDs installs the CRD manifests found at paths (files or
// directories) into the cluster at cfg and waits until they are served.
func InstallCRDs(cfg *rest.Config, paths ...string) error {
	_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true})
	return err
}
