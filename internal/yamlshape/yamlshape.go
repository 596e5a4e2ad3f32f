// Package yamlshape bounds what decoding a YAML (or JSON) document can
// cost before it is decoded.
//
// clientcmd.Load turns a kubeconfig into generic values and then JSON
// before it fills in its types: some 400 bytes of memory per node. A file
// of a few megabytes made of nothing but nodes ("[0,0,0,…]", "- - - …")
// holds gigabytes while it decodes, and a few aliases to aliases expand to
// more nodes still. Check counts, from the bytes alone, an upper bound of
// the nodes a document can hold, and refuses one that could hold more than
// it allows; a document with anchors and aliases is also parsed without
// expanding them, and refused when its aliases would expand past the same
// bound.
package yamlshape

import (
	"bytes"
	"errors"
	"fmt"

	yaml "go.yaml.in/yaml/v3"
)

// ErrTooManyNodes is Check's refusal.
var ErrTooManyNodes = errors.New("too many YAML nodes")

// Check refuses data that could decode to more than maxNodes nodes, its
// aliases expanded. The error names the bound, never the content.
//
// Every node but a document's first is introduced by a newline, one of
// the bytes ',', '[', '{' or ':', or a '-' or '?' followed by a blank (a
// line, a flow entry or collection, a value, a block sequence entry or an
// explicit key), so their count bounds the nodes; a flow mapping entry with no value ("{a}") makes two
// nodes of one such byte, hence the factor of two. Text that is not
// structure (a certificate in base64, a token) has few of them.
func Check(data []byte, maxNodes int) error {
	indicators := 0
	for i, b := range data {
		switch b {
		case '\n', ',', '[', '{', ':':
			indicators++
		case '-', '?':
			// An entry or key only when blank follows ("- a", "? a");
			// within a scalar ("a-b", a token) it is text.
			if i+1 == len(data) || blank(data[i+1]) {
				indicators++
			}
		}
	}
	if 2*indicators+1 > maxNodes {
		return fmt.Errorf("%w: up to %d (%d lines, entries and keys), more than the %d allowed", ErrTooManyNodes, 2*indicators+1, indicators, maxNodes)
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
	if expandedSize(&doc, maxNodes) > maxNodes {
		return fmt.Errorf("%w: its aliases expand to more than the %d allowed", ErrTooManyNodes, maxNodes)
	}
	return nil
}

func blank(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// expandedSize counts the nodes under n with every alias expanded, up to
// more than limit (it stops counting there). An alias to a node that holds
// it counts as more than limit.
func expandedSize(n *yaml.Node, limit int) int {
	const inProgress = -1
	sizes := map[*yaml.Node]int{}
	var size func(n *yaml.Node) int
	size = func(n *yaml.Node) int {
		if n == nil {
			return 0
		}
		if s, ok := sizes[n]; ok {
			if s == inProgress {
				return limit + 1 // an alias within its own anchor
			}
			return s
		}
		sizes[n] = inProgress
		total := 1
		if n.Kind == yaml.AliasNode {
			total = size(n.Alias)
		}
		for _, c := range n.Content {
			if total > limit {
				break
			}
			total += size(c)
		}
		total = min(total, limit+1)
		sizes[n] = total
		return total
	}
	return size(n)
}
