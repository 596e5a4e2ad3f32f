package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/config"
)

// A directory of kubeconfigs, such as a mounted Secret, is a fleet: one
// cluster per context. Problems come back with the clusters that are fine.
func ExampleLoadConfigsFromConfigFile() {
	dir, _ := os.MkdirTemp("", "fleet")
	defer os.RemoveAll(dir)
	_ = os.WriteFile(filepath.Join(dir, "east"), []byte(`apiVersion: v1
kind: Config
clusters:
- name: east
  cluster: {server: "https://10.0.0.1:6443"}
users:
- name: controller
  user: {token: not-a-real-token}
contexts:
- name: east-1
  context: {cluster: east, user: controller}
`), 0o600)
	_ = os.WriteFile(filepath.Join(dir, "west"), []byte("clusters: [oops"), 0o600)

	configs, err := config.LoadConfigsFromConfigFile(dir)
	for _, c := range configs {
		fmt.Println(c.Name, c.Config.Host)
	}
	if fe, ok := errors.AsType[*config.FileError](err); ok {
		fmt.Println("broken:", filepath.Base(fe.Path), errors.Is(err, config.ErrInvalidKubeconfig))
	}
	// Output:
	// east-1 https://10.0.0.1:6443
	// broken: west true
}

// Kubeconfigs whose users run programs (exec plugins, auth providers) are
// refused unless the caller trusts where they come from.
func ExampleAllowAuthPlugins() {
	dir, _ := os.MkdirTemp("", "fleet")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "config")
	_ = os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters:
- name: gke
  cluster: {server: "https://10.0.0.2"}
users:
- name: gcloud
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: gke-gcloud-auth-plugin, interactiveMode: Never}
contexts:
- name: gke
  context: {cluster: gke, user: gcloud}
`), 0o600)

	_, err := config.LoadConfigsFromConfigFile(path)
	fmt.Println(errors.Is(err, config.ErrAuthPluginRefused))

	configs, err := config.LoadConfigsFromConfigFile(path, config.AllowAuthPlugins())
	fmt.Println(len(configs), err)
	// Output:
	// true
	// 1 <nil>
}

// A config that does not come from a file, such as the one the controller
// runs with, is named by hand.
func ExampleNewNamedConfig() {
	cfg := &rest.Config{Host: "https://10.0.0.3:6443", BearerToken: "not-a-real-token"}
	nc := config.NewNamedConfig("local", cfg)

	// The same content is the same cluster, whatever the pointer.
	again := config.NewNamedConfig("local", rest.CopyConfig(cfg))
	fmt.Println(nc, nc.Fingerprint() == again.Fingerprint())
	// Output:
	// local true
}

// A password in a server URL is never printed: pass hosts and client errors
// through RedactURL and RedactError before they reach a log or a status.
func ExampleRedactURL() {
	fmt.Println(config.RedactURL("https://admin:secret@10.0.0.1:6443"))
	fmt.Println(config.RedactError(errors.New(`Get "https://admin:secret@10.0.0.1:6443/api": EOF`)))
	// Output:
	// https://REDACTED@10.0.0.1:6443
	// Get "https://REDACTED@10.0.0.1:6443/api": EOF
}
