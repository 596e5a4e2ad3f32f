package readme

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// setupCall matches a kubebuilder main's
//
//	if err := (&X{...}).SetupWithManager(mgr); err != nil { ... }
//
// with the reconciler expression as group 1.
var setupCall = regexp.MustCompile(`(?s)if err := (\(&\w+\{.*?\}\))\.SetupWithManager\(mgr\); err != nil \{.*?\n\t\}`)

// TestKubebuilderMainMovesOver converts a kubebuilder-style main.go the
// way the README's migration section says, by renaming only, and compiles
// it: ctrl.NewManager becomes server.NewServer, mgr becomes srv, and each
// SetupWithManager(mgr) becomes srv.AddReconcilerSetup(....SetupWithManager).
// Everything else a kubebuilder main calls on its Manager (health and ready
// checks, the webhook server, metrics handlers, Elected, GetConfig, Start)
// must exist on the Server.
func TestKubebuilderMainMovesOver(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "kubebuilder_main.go.txt"))
	if err != nil {
		t.Fatal(err)
	}
	src := string(raw)
	build(t, "_kubebuilder_before", src) // the original compiles too

	if !setupCall.MatchString(src) {
		t.Fatal("no SetupWithManager(mgr) call to convert")
	}
	src = setupCall.ReplaceAllString(src, "mgr.AddReconcilerSetup($1.SetupWithManager)")
	src = strings.ReplaceAll(src, "ctrl.NewManager(", "server.NewServer(")
	src = regexp.MustCompile(`\bmgr\b`).ReplaceAllString(src, "srv")
	// The reconciler's own SetupWithManager keeps its parameter name.
	src = strings.ReplaceAll(src, "SetupWithManager(srv ctrl.Manager)", "SetupWithManager(mgr ctrl.Manager)")
	src = strings.ReplaceAll(src, "NewControllerManagedBy(srv)", "NewControllerManagedBy(mgr)")
	src = strings.Replace(src, "import (\n", "import (\n\t\"github.com/mccr-dev/mccr/server\"\n", 1)
	build(t, "_kubebuilder_after", src)
}

// build compiles src as the main package of a directory inside the module
// (so its go.mod resolves the imports) that the go command's ./... patterns
// ignore.
func build(t *testing.T, prefix, src string) {
	t.Helper()
	dir, err := os.MkdirTemp(".", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) }) // best effort: the go command ignores "_" directories anyway
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", os.DevNull, "./"+filepath.Base(dir))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s does not compile: %v\n%s\n%s", prefix, err, out, src)
	}
}
