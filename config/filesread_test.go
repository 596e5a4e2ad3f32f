package config

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"
)

// FilesRead lists the referenced files whose content a config holds, as the
// kubeconfig names them: what a watcher must watch to keep it current. A
// context that failed lists, on its FileError, what it read and the
// missing file inside its directory, never a refused one.
func TestFilesRead(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	selfSigned(t, filepath.Join(dir, "creds")) // ca.crt, token, …
	writeFile(t, filepath.Join(outside, "token"), []byte("OUTSIDE"))
	path := filepath.Join(dir, "config")
	writeFile(t, path, []byte(`clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1", certificate-authority: creds/ca.crt}
users:
- name: good
  user: {tokenFile: creds/token}
- name: missing
  user: {tokenFile: creds/missing}
- name: refused
  user: {tokenFile: `+filepath.Join(outside, "token")+`}
- name: missing-outside
  user: {tokenFile: `+filepath.Join(outside, "missing")+`}
contexts:
- {name: good, context: {cluster: c, user: good}}
- {name: missing, context: {cluster: c, user: missing}}
- {name: refused, context: {cluster: c, user: refused}}
- {name: missing-outside, context: {cluster: c, user: missing-outside}}
`))
	ca, token := filepath.Join(dir, "creds", "ca.crt"), filepath.Join(dir, "creds", "token")

	cfgs, err := LoadFile(path)
	if len(cfgs) != 1 || cfgs[0].Name != "good" {
		t.Fatalf("configs = %v, err = %v", cfgs, err)
	}
	if got := cfgs[0].FilesRead(); !slices.Equal(got, []string{ca, token}) {
		t.Errorf("good: FilesRead = %q", got)
	}
	want := map[string][]string{
		"missing":         {ca, filepath.Join(dir, "creds", "missing")},
		"refused":         {ca},
		"missing-outside": {ca},
	}
	for _, e := range appendFlat(nil, err) {
		var fe *FileError
		if !errors.As(e, &fe) {
			t.Fatalf("not a FileError: %v", e)
		}
		w, ok := want[fe.Context]
		if !ok {
			t.Errorf("unexpected error %v", e)
			continue
		}
		delete(want, fe.Context)
		if got := fe.FilesRead(); !slices.Equal(got, w) {
			t.Errorf("%s: FilesRead = %q, want %q", fe.Context, got, w)
		}
	}
	if len(want) > 0 {
		t.Errorf("no error for %v", want)
	}

	// Files in the caller's roots are left to client-go, and not read into
	// the config; those of the kubeconfig's own directory still are.
	cfgs, _ = LoadFile(path, AllowFileReferences(outside))
	wantRead := map[string][]string{"good": {ca, token}, "refused": {ca}}
	for _, c := range cfgs {
		if got := c.FilesRead(); !slices.Equal(got, wantRead[c.Name]) {
			t.Errorf("AllowFileReferences(outside): %s: FilesRead = %q, want %q", c.Name, got, wantRead[c.Name])
		}
		if c.Name == "refused" && c.Config.BearerTokenFile != filepath.Join(outside, "token") {
			t.Errorf("AllowFileReferences(outside): the allowed token file is not left to client-go: %q", c.Config.BearerTokenFile)
		}
	}
	// With no roots, every file is left to client-go.
	cfgs, _ = LoadFile(path, AllowFileReferences())
	for _, c := range cfgs {
		if got := c.FilesRead(); got != nil {
			t.Errorf("AllowFileReferences(): %s: FilesRead = %q", c.Name, got)
		}
	}
	var nilConfig *NamedConfig
	if nilConfig.FilesRead() != nil || NewNamedConfig("x", nil).FilesRead() != nil {
		t.Error("FilesRead of a config from no file")
	}
}
