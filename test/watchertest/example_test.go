package watchertest_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/test/watchertest"
)

// kubeconfigDir is a Source for a watcher of a directory of kubeconfig
// files: one file per cluster, one context in it, named after the
// cluster. It checks configs by what they carry; a Source on real API
// servers would also connect (see package test for a fleet of them).
type kubeconfigDir struct {
	dir string
	// watch makes the watcher; tests of the kit wrap it.
	watch func(dir string) (configwatcher.ConfigWatcher, error)
}

const exampleServer = "https://127.0.0.1:6443"

// tokens are the two credentials a cluster may carry.
var tokens = [2]string{"token-one-0123456789", "token-two-9876543210"}

func (k *kubeconfigDir) Watch() (configwatcher.ConfigWatcher, error) { return k.watch(k.dir) }

func (k *kubeconfigDir) path(c watchertest.Cluster) string {
	return filepath.Join(k.dir, c.Name+".kubeconfig")
}

func (k *kubeconfigDir) Write(_ context.Context, c watchertest.Cluster) error {
	return k.writeContext(c, c.Name, nil)
}

func (k *kubeconfigDir) WriteNamed(_ context.Context, c watchertest.Cluster, name string) (bool, error) {
	return true, k.writeContext(c, name, nil)
}

// Touch adds a comment: the file changes, its clusters do not.
func (k *kubeconfigDir) Touch(_ context.Context, c watchertest.Cluster) error {
	return k.writeContext(c, c.Name, []byte("# reviewed\n"))
}

// Break writes YAML cut short, a token in it that no error may quote.
func (k *kubeconfigDir) Break(_ context.Context, c watchertest.Cluster) error {
	return k.replace(c, []byte("apiVersion: v1\nkind: Config\nusers: [{name: x, user: {token: "+tokens[c.Credentials]+"}}\n"))
}

func (k *kubeconfigDir) Delete(_ context.Context, c watchertest.Cluster) error {
	return os.Remove(k.path(c))
}

func (k *kubeconfigDir) ClusterName(c watchertest.Cluster) string { return c.Name }

func (k *kubeconfigDir) Object(c watchertest.Cluster) string { return k.path(c) }

func (k *kubeconfigDir) Reaches(_ context.Context, cfg *config.NamedConfig, c watchertest.Cluster) error {
	if cfg.Config.Host != exampleServer || cfg.Config.BearerToken != tokens[c.Credentials] {
		return errors.New("not the cluster's server with its token")
	}
	return nil
}

func (k *kubeconfigDir) Secrets() []string { return tokens[:] }

// writeContext writes c's file with one context, name, and extra lines.
// A name that is not UTF-8 goes in raw, as nothing would encode it.
func (k *kubeconfigDir) writeContext(c watchertest.Cluster, name string, extra []byte) error {
	const placeholder = "NAME-PLACEHOLDER"
	inFile := name
	if !utf8.ValidString(name) {
		inFile = placeholder
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: exampleServer}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: tokens[c.Credentials]}
	kc.Contexts[inFile] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	if inFile != name {
		data = bytes.ReplaceAll(data, []byte(placeholder), []byte(name))
	}
	return k.replace(c, append(data, extra...))
}

// replace puts data in c's file by renaming a new file over it, as editors
// and the kubelet do.
func (k *kubeconfigDir) replace(c watchertest.Cluster, data []byte) error {
	tmp := filepath.Join(k.dir, "."+c.Name+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, k.path(c))
}

func newKubeconfigDir(t *testing.T) watchertest.Source {
	return &kubeconfigDir{dir: t.TempDir(), watch: func(dir string) (configwatcher.ConfigWatcher, error) {
		return configwatcher.NewFileWatcher(dir)
	}}
}

// The kit run on the FileWatcher over a directory of kubeconfig files.
// In a test of the watcher's package:
//
//	func TestConformance(t *testing.T) {
//		watchertest.Run(t, watchertest.Harness{NewSource: newKubeconfigDir})
//	}
//
// (this package's own tests do just that).
func Example() {
	h := watchertest.Harness{
		NewSource: newKubeconfigDir,
		// The FileWatcher reads a burst of changes DefaultDebounce after
		// its last event: half a second of quiet is plenty.
		Quiet: 500 * time.Millisecond,
	}
	_ = h // watchertest.Run(t, h)
}
