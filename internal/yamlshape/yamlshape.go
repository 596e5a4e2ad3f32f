// Package yamlshape bounds what decoding a YAML (or JSON) document can
// cost before it is decoded.
//
// clientcmd.Load turns a kubeconfig into generic values and then JSON
// before it fills in its types: some 400 bytes of memory per node. A file
// of a few megabytes made of nothing but nodes ("[0,0,0,…]", "- - - …")
// holds gigabytes while it decodes, and a few aliases to aliases expand to
// more nodes still, or repeat a long scalar until the text alone is
// gigabytes. Check counts, from the bytes alone, an upper bound of the
// nodes a document can hold, and refuses one that could hold more than it
// allows; a document with anchors and aliases is also parsed without
// expanding them, and refused when its aliases would expand past the same
// bound, or to more text than it allows.
package yamlshape

import (
	"bytes"
	"errors"
	"fmt"

	yaml "go.yaml.in/yaml/v3"
)

var (
	// ErrTooManyNodes is Check's refusal of a document that could hold
	// too many nodes.
	ErrTooManyNodes = errors.New("too many YAML nodes")
	// ErrTooMuchText is Check's refusal of a document whose aliases
	// expand to too much text: few nodes, each a long scalar repeated.
	ErrTooMuchText = errors.New("too much YAML text")
	// ErrNotUTF8 is Check's refusal of a document in another encoding.
	ErrNotUTF8 = errors.New("not UTF-8")
)

// Check refuses data that could decode to more than maxNodes nodes, its
// aliases expanded; a document with aliases that would decode to more
// than maxText bytes of JSON text in its scalars (keys included), its
// aliases expanded; and data that is not UTF-8 (a BOM of UTF-16 or UTF-32,
// a NUL byte: YAML decoders read UTF-16 too, and its bytes would not be
// counted as below). The error names the bound, never the content.
//
// Every node but a document's first is introduced by a line break, one of
// the bytes ',', '[', '{', ':' or '?', or a '-' followed by a blank (a
// line, a flow entry or collection, a value, an explicit key or a block
// sequence entry), so their count bounds the nodes; a flow mapping entry
// with no value ("{a}") makes two nodes of one such byte, hence the factor
// of two. Line breaks are YAML's: "\n", "\r", NEL, and the line and
// paragraph separators. Text that is not structure (a certificate in
// base64, a token) has few of them. The bytes '<', '>', '&', '\\', '"' and
// tab count as an eighth of a node each: decoding turns each of the first
// three, and what YAML escapes such as "\0" stand for, into six bytes of
// JSON ("\u003c"), and the last two into two, so a long scalar of them
// costs what nodes do.
//
// Nodes alone do not bound what aliases cost: "a: &a <a megabyte>" and a
// list of a thousand "*a" are a few thousand nodes, and a gigabyte of JSON
// once decoded. A document with anchors and aliases is therefore also
// refused (ErrTooMuchText) when its scalars, each counted as long as JSON
// writes it and each alias as what it stands for, exceed maxText.
func Check(data []byte, maxNodes, maxText int) error {
	if bytes.HasPrefix(data, []byte{0xfe, 0xff}) || bytes.HasPrefix(data, []byte{0xff, 0xfe}) || bytes.IndexByte(data, 0) >= 0 {
		return fmt.Errorf("%w: not UTF-8 (a byte order mark of UTF-16 or UTF-32, or a NUL byte)", ErrNotUTF8)
	}
	indicators, escaped := 0, 0
	for i, b := range data {
		switch {
		case b == '\n' || b == '\r' || b == ',' || b == '[' || b == '{' || b == ':':
			indicators++
		case b == '?':
			// An explicit key; within a flow collection it needs no blank
			// after it ("[?a,?b]": a map, its key and null for each).
			indicators++
		case b == '-':
			// An entry only when blank follows ("- a"); within a scalar
			// ("a-b", a token) it is text.
			if i+1 == len(data) || blank(data[i+1:]) {
				indicators++
			}
		case jsonExtra(b) > 0:
			escaped++
		case b >= 0x80 && unicodeBreak(data[i:]) > 0:
			indicators++
		}
	}
	if nodes := 2*indicators + escaped/8 + 1; nodes > maxNodes {
		return fmt.Errorf("%w: up to %d (%d line breaks, entries and keys, %d bytes JSON escapes), more than the %d allowed", ErrTooManyNodes, nodes, indicators, escaped, maxNodes)
	}
	// An alias needs an anchor ('&') to name and a '*' to refer to it.
	if bytes.IndexByte(data, '&') < 0 || bytes.IndexByte(data, '*') < 0 {
		return nil
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		// Another decoder may read what this one does not, aliases and
		// all: uncounted, they are refused. (The message says nothing of
		// the parse error, which may quote the document.)
		return fmt.Errorf("%w: anchors and aliases in a document that does not parse as YAML, left uncounted", ErrTooManyNodes)
	}
	switch size := expandedSize(&doc, maxNodes, maxText); {
	case size.nodes > maxNodes:
		return fmt.Errorf("%w: its aliases expand to more than the %d allowed", ErrTooManyNodes, maxNodes)
	case size.text > maxText:
		return fmt.Errorf("%w: its aliases expand to more than the %d bytes allowed", ErrTooMuchText, maxText)
	}
	return nil
}

// blank tells whether data begins with a space, a tab or a line break.
func blank(data []byte) bool {
	switch data[0] {
	case ' ', '\t', '\n', '\r':
		return true
	}
	return unicodeBreak(data) > 0
}

// unicodeBreak is the length of the line break beyond ASCII that data
// begins with (NEL, LINE SEPARATOR, PARAGRAPH SEPARATOR), 0 if none.
func unicodeBreak(data []byte) int {
	switch {
	case len(data) >= 2 && data[0] == 0xc2 && data[1] == 0x85:
		return 2
	case len(data) >= 3 && data[0] == 0xe2 && data[1] == 0x80 && (data[2] == 0xa8 || data[2] == 0xa9):
		return 3
	}
	return 0
}

// shape is what a node holds with every alias expanded: its nodes, and the
// JSON length of its scalars.
type shape struct{ nodes, text int }

// over says whether s exceeds either bound.
func (s shape) over(nodes, text int) bool { return s.nodes > nodes || s.text > text }

// expandedSize counts the nodes and the text under n with every alias
// expanded, up to more than nodeLimit or textLimit (it stops counting
// there). An alias to a node that holds it counts as more than both.
func expandedSize(n *yaml.Node, nodeLimit, textLimit int) shape {
	inProgress := shape{nodes: -1}
	beyond := shape{nodes: nodeLimit + 1, text: textLimit + 1}
	sizes := map[*yaml.Node]shape{}
	var size func(n *yaml.Node) shape
	size = func(n *yaml.Node) shape {
		if n == nil {
			return shape{}
		}
		if s, ok := sizes[n]; ok {
			if s == inProgress {
				return beyond // an alias within its own anchor
			}
			return s
		}
		sizes[n] = inProgress
		total := shape{nodes: 1}
		switch n.Kind {
		case yaml.AliasNode:
			total = size(n.Alias)
		case yaml.ScalarNode:
			total.text = jsonLength(n.Value)
		case yaml.DocumentNode, yaml.SequenceNode, yaml.MappingNode:
			// What they hold is counted below.
		}
		for _, c := range n.Content {
			if total.over(nodeLimit, textLimit) {
				break
			}
			s := size(c)
			total.nodes += s.nodes
			total.text += s.text
		}
		total.nodes = min(total.nodes, nodeLimit+1)
		total.text = min(total.text, textLimit+1)
		sizes[n] = total
		return total
	}
	return size(n)
}

// jsonLength is how many bytes JSON takes to write s as a string: each
// byte and what jsonExtra adds to it, and six for each line or paragraph
// separator (three bytes, written as \u2028 or \u2029).
func jsonLength(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		n += jsonExtra(s[i])
		if s[i] == 0xe2 && unicodeBreak([]byte(s[i:min(i+3, len(s))])) == 3 {
			n += 3
		}
	}
	return n
}

// jsonExtra is how many bytes beyond itself encoding/json writes for byte
// b of a string: five for what it escapes as \u00XX ('<', '>', '&' and
// control characters but those below), one for '"', '\\', '\b', '\f',
// '\n', '\r' and '\t', none for any other.
func jsonExtra(b byte) int {
	switch {
	case b == '"' || b == '\\' || b == '\b' || b == '\f' || b == '\n' || b == '\r' || b == '\t':
		return 1
	case b == '<' || b == '>' || b == '&' || b < 0x20:
		return 5
	}
	return 0
}
