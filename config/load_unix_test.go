//go:build unix

package config

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// A FIFO blocks whoever opens it until a writer shows up. Neither a FIFO in a
// watched directory nor one named by a kubeconfig may hang loading.
func TestLoadIgnoresFIFOs(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	writeFile(t, filepath.Join(dir, "good"), kubeconfig(t, ctxSpec{"good", "https://127.0.0.1:6443", "t"}))
	writeFile(t, filepath.Join(dir, "uses-fifo"), []byte(`
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443", certificate-authority: fifo}
users:
- name: u
  user: {tokenFile: fifo}
contexts:
- name: fifo-user
  context: {cluster: c, user: u}
`))
	files, err := KubeconfigFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(dir, "good"), filepath.Join(dir, "uses-fifo")}; !slices.Equal(files, want) {
		t.Errorf("KubeconfigFiles = %v, want %v", files, want)
	}
	cfgs, err := LoadConfigsFromConfigFile(dir)
	if !errors.Is(err, ErrInvalidKubeconfig) {
		t.Errorf("err = %v, want ErrInvalidKubeconfig", err)
	}
	if got := names(cfgs); !slices.Equal(got, []string{"good"}) {
		t.Errorf("configs = %v", got)
	}
	if _, err := LoadConfigsFromConfigFile(fifo); err == nil || !strings.Contains(err.Error(), fifo) {
		t.Errorf("loading a FIFO: err = %v", err)
	}
}
