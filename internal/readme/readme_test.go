package readme

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestQuickstartCompiles builds the program between the quickstart markers
// of the README as a main package of this module.
func TestQuickstartCompiles(t *testing.T) {
	build(t, "_quickstart", markedGoBlock(t, "README.md", "quickstart"))
}

// TestMigratingMainCompiles builds the main.go of docs/migrating.md, the
// kubebuilder main after the migration.
func TestMigratingMainCompiles(t *testing.T) {
	build(t, "_migrating", markedGoBlock(t, filepath.Join("docs", "migrating.md"), "migrating-main"))
}

// markedGoBlock returns the ```go block between <!-- name:begin --> and
// <!-- name:end --> of the repository file path.
func markedGoBlock(t *testing.T, path, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", path))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	begin := strings.Index(text, "<!-- "+name+":begin -->")
	end := strings.Index(text, "<!-- "+name+":end -->")
	if begin < 0 || end < begin {
		t.Fatalf("%s has no %s markers", path, name)
	}
	block := text[begin:end]
	start := strings.Index(block, "```go\n")
	stop := strings.LastIndex(block, "```")
	if start < 0 || stop <= start {
		t.Fatalf("%s: no ```go block between the %s markers", path, name)
	}
	return block[start+len("```go\n") : stop]
}
