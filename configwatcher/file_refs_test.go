package configwatcher_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/internal/testcert"
)

// Files a kubeconfig refers to and that mccr reads itself (by default: they
// lie in the kubeconfig's directory) are watched wherever they are, so that
// a rotated token or certificate is an Updated event (docs/security.md,
// directory rule 4).

// tokenFileKubeconfig is a kubeconfig with one context, east, whose user
// reads its token from tokenFile (as written: relative to the kubeconfig).
func tokenFileKubeconfig(tokenFile string) []byte {
	return []byte(`clusters:
- name: c
  cluster: {server: "` + server(1) + `", insecure-skip-tls-verify: true}
users:
- name: u
  user: {tokenFile: "` + tokenFile + `"}
contexts:
- name: east
  context: {cluster: c, user: u}
`)
}

// caFileKubeconfig is a kubeconfig with one context, east, whose cluster's
// CA is the file ca (as written).
func caFileKubeconfig(ca string) []byte {
	return []byte(`clusters:
- name: c
  cluster: {server: "` + server(1) + `", certificate-authority: "` + ca + `"}
users:
- name: u
  user: {token: t}
contexts:
- name: east
  context: {cluster: c, user: u}
`)
}

func expectToken(t *testing.T, ev configwatcher.Event, want string) {
	t.Helper()
	if got := ev.Config.Config.BearerToken; got != want {
		t.Fatalf("%s: token = %q, want %q", describe(ev), got, want)
	}
	if f := ev.Config.Config.BearerTokenFile; f != "" {
		t.Fatalf("%s: token file %q left to client-go, want it read by mccr", describe(ev), f)
	}
}

func expectCA(t *testing.T, ev configwatcher.Event, want []byte) {
	t.Helper()
	if got := ev.Config.Config.CAData; !bytes.Equal(got, want) {
		t.Fatalf("%s: CA data is not the CA file's content (%d bytes, want %d)", describe(ev), len(got), len(want))
	}
}

// A token file in a sub-directory of the watched directory, rotated the
// way tools write files (a temporary file renamed over it).
func TestFileWatcherReferencedTokenInSubdirectory(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "creds", "token"), []byte("token-one\n"))
	writeFile(t, filepath.Join(dir, "config"), tokenFileKubeconfig("creds/token"))
	w := start(t, dir)
	expectToken(t, expectEvents(t, w, "Added east "+server(1))[0], "token-one")

	writeLikeAnEditor(t, filepath.Join(dir, "creds", "token"), []byte("token-two\n"))
	expectToken(t, expectEvents(t, w, "Updated east "+server(1))[0], "token-two")

	// Written in place, too.
	writeFile(t, filepath.Join(dir, "creds", "token"), []byte("token-three\n"))
	expectToken(t, expectEvents(t, w, "Updated east "+server(1))[0], "token-three")
	expectNoError(t, w)
}

// A token file next to the kubeconfig, written in place.
func TestFileWatcherReferencedTokenInSameDirectory(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "token"), []byte("token-one\n"))
	writeFile(t, filepath.Join(dir, "config"), tokenFileKubeconfig("token"))
	w := start(t, dir)
	expectToken(t, expectEvents(t, w, "Added east "+server(1))[0], "token-one")

	writeFile(t, filepath.Join(dir, "token"), []byte("token-two\n"))
	expectToken(t, expectEvents(t, w, "Updated east "+server(1))[0], "token-two")
	expectNoError(t, w)
}

// ~/.kube/config as a link into a dotfiles repository, watched as a single
// file, its token file next to the link (relative paths resolve against the
// link's directory, as kubectl resolves them).
func TestFileWatcherReferencedTokenNextToSymlinkedFile(t *testing.T) {
	leakcheck.Cleanup(t)
	repo := t.TempDir()
	kube := t.TempDir()
	writeFile(t, filepath.Join(repo, "config"), tokenFileKubeconfig("token"))
	symlink(t, filepath.Join(repo, "config"), filepath.Join(kube, "config"))
	writeFile(t, filepath.Join(kube, "token"), []byte("token-one\n"))
	w := start(t, filepath.Join(kube, "config"))
	expectToken(t, expectEvents(t, w, "Added east "+server(1))[0], "token-one")

	writeLikeAnEditor(t, filepath.Join(kube, "token"), []byte("token-two\n"))
	expectToken(t, expectEvents(t, w, "Updated east "+server(1))[0], "token-two")

	// Other files next to the link are none of the watcher's business.
	writeFile(t, filepath.Join(kube, "cache.json"), []byte("{}"))
	expectQuiet(t, w)
	expectNoError(t, w)
}

// A CA file in a sub-directory, rotated by rename.
func TestFileWatcherReferencedCAInSubdirectoryRotated(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := t.TempDir()
	ca1, _ := testcert.SelfSigned(t)
	ca2, _ := testcert.SelfSigned(t)
	writeFile(t, filepath.Join(dir, "pki", "east", "ca.crt"), ca1)
	writeFile(t, filepath.Join(dir, "east.yaml"), caFileKubeconfig("pki/east/ca.crt"))
	w := start(t, dir)
	expectCA(t, expectEvents(t, w, "Added east "+server(1))[0], ca1)

	writeLikeAnEditor(t, filepath.Join(dir, "pki", "east", "ca.crt"), ca2)
	expectCA(t, expectEvents(t, w, "Updated east "+server(1))[0], ca2)
	expectNoError(t, w)
}

// Referenced files in a Kubernetes Secret volume mounted in a sub-directory:
// the kubelet swaps the "..data" symlink to a new timestamped directory.
func TestFileWatcherReferencedFilesInSecretVolumeSwap(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := t.TempDir()
	ca1, _ := testcert.SelfSigned(t)
	ca2, _ := testcert.SelfSigned(t)
	vol := newSecretVolume(t, filepath.Join(dir, "secret"), map[string][]byte{"ca.crt": ca1, "token": []byte("token-one")})
	writeFile(t, filepath.Join(dir, "config"), []byte(strings.Replace(string(caFileKubeconfig("secret/ca.crt")),
		"user: {token: t}", "user: {tokenFile: secret/token}", 1)))
	w := start(t, dir)
	ev := expectEvents(t, w, "Added east "+server(1))[0]
	expectCA(t, ev, ca1)
	expectToken(t, ev, "token-one")

	vol.update(t, map[string][]byte{"ca.crt": ca1, "token": []byte("token-two")})
	expectToken(t, expectEvents(t, w, "Updated east "+server(1))[0], "token-two")
	vol.update(t, map[string][]byte{"ca.crt": ca2, "token": []byte("token-two")})
	ev = expectEvents(t, w, "Updated east "+server(1))[0]
	expectCA(t, ev, ca2)
	expectToken(t, ev, "token-two")
	// The same content again: nothing changed.
	vol.update(t, map[string][]byte{"ca.crt": ca2, "token": []byte("token-two")})
	expectQuiet(t, w)
	expectNoError(t, w)
}

// A referenced file that goes away is the error that names it (never the
// secret); the cluster keeps its last good config until the file is back.
// A file that was missing from the start is picked up when it appears.
func TestFileWatcherReferencedFileRemovedAndBack(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := t.TempDir()
	token := filepath.Join(dir, "creds", "token")
	writeFile(t, token, []byte("token-SECRET-one\n"))
	writeFile(t, filepath.Join(dir, "config"), tokenFileKubeconfig("creds/token"))
	w := start(t, dir)
	expectToken(t, expectEvents(t, w, "Added east "+server(1))[0], "token-SECRET-one")

	if err := os.Remove(token); err != nil {
		t.Fatal(err)
	}
	err := awaitError(t, w, filepath.Join(dir, "config"), `"east"`, "tokenFile", token)
	if strings.Contains(err.Error(), "SECRET") {
		t.Errorf("error quotes the token: %v", err)
	}
	expectQuiet(t, w)

	writeFile(t, token, []byte("token-SECRET-two\n"))
	expectToken(t, expectEvents(t, w, "Updated east "+server(1))[0], "token-SECRET-two")

	// A new kubeconfig whose token file is not there yet: an error, then
	// Added once the file is written.
	late := filepath.Join(dir, "creds", "west-token")
	writeFile(t, filepath.Join(dir, "west.yaml"), []byte(strings.ReplaceAll(string(tokenFileKubeconfig("creds/west-token")), "east", "west")))
	expectError(t, w, filepath.Join(dir, "west.yaml"), `"west"`, late)
	writeFile(t, late, []byte("token-west\n"))
	expectToken(t, expectEvents(t, w, "Added west "+server(1))[0], "token-west")
	expectNoError(t, w)
}

// A reference the kubeconfig drops is no longer followed, and one it gains
// is: after the kubeconfig moves its token file to another sub-directory,
// rotating the new file is an Updated event.
func TestFileWatcherReferenceMoved(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a", "token"), []byte("token-a\n"))
	writeFile(t, filepath.Join(dir, "b", "token"), []byte("token-b\n"))
	writeFile(t, filepath.Join(dir, "config"), tokenFileKubeconfig("a/token"))
	w := start(t, dir)
	expectToken(t, expectEvents(t, w, "Added east "+server(1))[0], "token-a")

	writeLikeAnEditor(t, filepath.Join(dir, "config"), tokenFileKubeconfig("b/token"))
	expectToken(t, expectEvents(t, w, "Updated east "+server(1))[0], "token-b")
	writeFile(t, filepath.Join(dir, "a", "token"), []byte("token-a2\n"))
	expectQuiet(t, w)
	writeLikeAnEditor(t, filepath.Join(dir, "b", "token"), []byte("token-b2\n"))
	expectToken(t, expectEvents(t, w, "Updated east "+server(1))[0], "token-b2")
	expectNoError(t, w)
}

// Kubeconfigs naming files in more directories than the watcher watches
// for references: a problem says so, and the clusters are served.
func TestFileWatcherReferencedDirectoriesBounded(t *testing.T) {
	leakcheck.Cleanup(t)
	dir := t.TempDir()
	const n = 300 // more than the watcher's bound of 256
	var b strings.Builder
	b.WriteString("clusters:\n- name: c\n  cluster: {server: \"" + server(1) + "\", insecure-skip-tls-verify: true}\nusers:\n")
	for i := range n {
		writeFile(t, filepath.Join(dir, "creds", fmt.Sprint(i), "token"), []byte("t"))
		fmt.Fprintf(&b, "- name: u%d\n  user: {tokenFile: creds/%d/token}\n", i, i)
	}
	b.WriteString("contexts:\n")
	want := make([]string, 0, n)
	for i := range n {
		fmt.Fprintf(&b, "- name: c%d\n  context: {cluster: c, user: u%d}\n", i, i)
		want = append(want, fmt.Sprintf("Added c%d %s", i, server(1)))
	}
	writeFile(t, filepath.Join(dir, "config"), []byte(b.String()))
	w := start(t, dir)
	expectEvents(t, w, want...)
	expectError(t, w, "more than 256 directories", "not watched")
}
