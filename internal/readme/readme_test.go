package readme

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestQuickstartCompiles builds the program between the quickstart markers
// of the README as a main package of this module.
func TestQuickstartCompiles(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	begin := strings.Index(text, "<!-- quickstart:begin -->")
	end := strings.Index(text, "<!-- quickstart:end -->")
	if begin < 0 || end < begin {
		t.Fatal("README.md has no quickstart markers")
	}
	block := text[begin:end]
	start := strings.Index(block, "```go\n")
	stop := strings.LastIndex(block, "```")
	if start < 0 || stop <= start {
		t.Fatal("no ```go block between the quickstart markers")
	}
	code := block[start+len("```go\n") : stop]

	// Inside the module (so its go.mod resolves the imports), in a directory
	// the go command's ./... patterns ignore.
	dir, err := os.MkdirTemp(".", "_quickstart")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) }) // best effort: the go command ignores "_" directories anyway
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", os.DevNull, "./"+filepath.Base(dir))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("README quickstart does not compile: %v\n%s", err, out)
	}
}
