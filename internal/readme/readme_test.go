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

	build(t, "_quickstart", code)
}
