package yamlshape

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v3"
)

const (
	bound     = 1000
	textBound = 100_000
)

// Shapes that hold many nodes in few bytes are refused, whichever way the
// YAML writes them; a kubeconfig's own shape is not.
func TestCheck(t *testing.T) {
	refused := map[string]string{
		"flow sequence":        "clusters: [" + strings.Repeat("0,", bound) + "0]",
		"nested flow":          strings.Repeat("[", bound) + strings.Repeat("]", bound),
		"flow mappings":        "[" + strings.Repeat("{a},", bound/2) + "{a}]",
		"keys without values":  "{" + strings.Repeat("a,", bound/2) + "a}",
		"block sequence":       strings.Repeat("- 0\n", bound),
		"nested block entries": strings.Repeat("- ", bound) + "0",
		"explicit keys":        strings.Repeat("? ", bound) + "0",
		"lines":                strings.Repeat("a: 0\n", bound/2),
		"JSON":                 `{"clusters":[` + strings.Repeat(`{},`, bound/2) + `{}]}`,
		"aliases of aliases": "a: &a [0,0,0,0,0,0,0,0,0,0]\n" +
			"b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n" +
			"c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n" +
			"d: [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n",
		"alias within its anchor": "a: &a [*a]\n",
		// YAML's other line breaks, after a block entry's dash.
		"entries broken by NEL": "clusters:\u0085" + strings.Repeat("-\u0085", bound),
		"entries broken by LS":  "clusters:\u2028" + strings.Repeat("-\u2028", bound),
		"entries broken by PS":  "clusters:\u2029" + strings.Repeat("-\u2029", bound),
		"entries broken by CR":  "clusters:\r" + strings.Repeat("-\r", bound),
		// Bytes JSON turns into six each.
		"escaped scalar": "x: \"" + strings.Repeat("<>&", 8*bound/3) + "\"",
		"escapes":        "x: \"" + strings.Repeat("\\0", 8*bound) + "\"",
		"tabs":           "x: '" + strings.Repeat("\t", 8*bound) + "'",
		"quotes":         "x: '" + strings.Repeat("\"", 8*bound) + "'",
		// In a flow collection '?' is a key with no blank after it.
		"flow keys":         "[" + strings.Repeat("?a,", bound/2) + "?a]",
		"aliases, not YAML": "a: &a [0]\nb: [*a, *a\n",
	}
	// Few nodes, much text: an alias to a long scalar repeats the scalar.
	long := strings.Repeat("x", textBound/10)
	tooMuchText := map[string]string{
		"aliases of a long scalar":  "a: &a " + long + "\nb: [" + strings.Repeat("*a,", 10) + "*a]\n",
		"aliases of a long key":     "a: &a {? " + long + " : 0}\nb: [" + strings.Repeat("*a,", 10) + "*a]\n",
		"aliases of a merged map":   "a: &a {k: " + long + "}\nb: [" + strings.Repeat("{<<: *a},", 10) + "{<<: *a}]\n",
		"aliases of escaped bytes":  "a: &a '" + strings.Repeat("<", textBound/60) + "'\nb: [" + strings.Repeat("*a,", 10) + "*a]\n",
		"aliases of aliased scalar": "a: &a " + strings.Repeat("x", textBound/100) + "\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: [" + strings.Repeat("*b,", 20) + "*b]\n",
	}
	for name, doc := range tooMuchText {
		t.Run(name, func(t *testing.T) {
			err := Check([]byte(doc), bound, textBound)
			if !errors.Is(err, ErrTooMuchText) {
				t.Fatalf("Check = %v, want ErrTooMuchText", err)
			}
			if strings.Contains(err.Error(), "xxx") || strings.Contains(err.Error(), "<<<") {
				t.Errorf("error quotes the document: %v", err)
			}
		})
	}
	for name, doc := range map[string][]byte{
		"UTF-16LE": append([]byte{0xff, 0xfe}, []byte("c\x00:\x00 \x00[\x000\x00]\x00")...),
		"UTF-16BE": append([]byte{0xfe, 0xff}, []byte("\x00c\x00:\x00 \x00[\x000\x00]")...),
		"UTF-32":   append([]byte{0, 0, 0xfe, 0xff}, []byte("\x00\x00\x00c")...),
		"NUL":      []byte("clusters: [0]\x00"),
	} {
		t.Run(name, func(t *testing.T) {
			if err := Check(doc, bound, textBound); !errors.Is(err, ErrNotUTF8) {
				t.Fatalf("Check = %v, want ErrNotUTF8", err)
			}
		})
	}
	for name, doc := range refused {
		t.Run(name, func(t *testing.T) {
			err := Check([]byte(doc), bound, textBound)
			if !errors.Is(err, ErrTooManyNodes) {
				t.Fatalf("Check = %v, want ErrTooManyNodes", err)
			}
			if strings.Contains(err.Error(), "0,0") || strings.Contains(err.Error(), "*a") {
				t.Errorf("error quotes the document: %v", err)
			}
		})
	}
	accepted := map[string]string{
		"kubeconfig": `apiVersion: v1
kind: Config
clusters:
- name: a
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: ` + strings.Repeat("QUJD", 400) + `
users:
- name: a
  user:
    token: ` + strings.Repeat("x", 900) + `
contexts:
- name: a
  context: {cluster: a, user: a}
current-context: a
`,
		"a few aliases":               "a: &a {server: https://h}\nb: *a\nc: *a\n",
		"star in a token":             "user: {token: a*b&c}\n",
		"a long scalar, aliased once": "a: &a " + strings.Repeat("x", textBound/3) + "\nb: *a\n",
		"empty":                       "",
		"not YAML":                    "{[}",
	}
	for name, doc := range accepted {
		t.Run(name, func(t *testing.T) {
			if err := Check([]byte(doc), bound, textBound); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The bound holds for what a decoder builds: a document Check accepts has
// at most the bound's nodes, its aliases expanded.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"a: [0,0]", "a: &a [0]\nb: [*a,*a]", "- - 0", "{a, b: c}", "? a\n: b", "a: &a [*a]", "a:\u0085-\u0085-\u0085-", "a:\u2028-\u2029-\r-", "[?a,?a,?a]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		const limit, textLimit = 64, 256
		if Check([]byte(doc), limit, textLimit) != nil {
			return
		}
		var n yaml.Node
		if yaml.Unmarshal([]byte(doc), &n) != nil {
			return
		}
		got := expandedSize(&n, 1<<20, 1<<20)
		if got.nodes > limit {
			t.Fatalf("accepted a document of %d nodes, bound %d: %q", got.nodes, limit, doc)
		}
		if strings.Contains(doc, "&") && strings.Contains(doc, "*") && got.text > textLimit {
			t.Fatalf("accepted a document of %d bytes of text, its aliases expanded, bound %d: %q", got.text, textLimit, doc)
		}
	})
}

// FuzzJSONLength: the text bound counts a string as long as encoding/json
// writes it.
func FuzzJSONLength(f *testing.F) {
	for _, s := range []string{"", "a", "<&>", "\"\\", "\b\f\n\r\t\x01\x1f", "\u2028\u2029", "é☃", "\xe2\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return // encoding/json writes each invalid byte as \ufffd
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := jsonLength(s), len(b)-2; got != want {
			t.Fatalf("jsonLength(%q) = %d, encoding/json writes %d", s, got, want)
		}
	})
}
