package config

import (
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// MaxNameLength is the longest cluster name accepted, in bytes: a DNS
// subdomain's length, which every inventory's own names fit (a
// ClusterProfile or Cluster API Cluster name, an Argo CD cluster name, an
// EKS ARN, a kubeconfig context name as cloud CLIs write them).
const MaxNameLength = 253

// ErrInvalidName is wrapped by ValidateName's errors.
var ErrInvalidName = errors.New("invalid cluster name")

// ValidateName is the one gate every cluster name passes, whatever its
// source: Server.Add and every ConfigWatcher call it before a name is
// used. Names come from other people's objects and files, and go into
// metric labels, log lines, Lease names, events and status pages, so a name
// must be:
//
//   - non-empty, and at most MaxNameLength bytes;
//   - valid UTF-8;
//   - made of printable characters only (letters, marks, digits,
//     punctuation, symbols and the ASCII space): no control characters
//     (newlines, escapes, NUL), no invisible format characters (bidi
//     overrides, zero-width joiners), no other spaces or separators, and
//     none that print as nothing (Hangul fillers, the combining grapheme
//     joiner, variation selectors, the braille blank);
//   - without a leading or trailing space.
//
// Anything else a kubeconfig context or an inventory may call a cluster
// ("arn:aws:eks:eu-west-1:123456789012:cluster/prod", "gke_p_z_c",
// "kind-kind", "admin@east") passes. The error wraps ErrInvalidName and
// quotes the name with its odd bytes escaped, shortened if long.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidName)
	case len(name) > MaxNameLength:
		return fmt.Errorf("%w %s: longer than %d bytes (%d)", ErrInvalidName, QuoteName(name), MaxNameLength, len(name))
	case !utf8.ValidString(name):
		return fmt.Errorf("%w %s: not valid UTF-8", ErrInvalidName, QuoteName(name))
	case name[0] == ' ' || name[len(name)-1] == ' ':
		return fmt.Errorf("%w %s: leading or trailing space", ErrInvalidName, QuoteName(name))
	}
	for i, r := range name {
		switch {
		case !unicode.IsPrint(r):
			return fmt.Errorf("%w %s: character %U at byte %d is not printable", ErrInvalidName, QuoteName(name), r, i)
		case blankPrintable(r):
			return fmt.Errorf("%w %s: character %U at byte %d is printable but shows nothing", ErrInvalidName, QuoteName(name), r, i)
		}
	}
	return nil
}

// blankPrintable tells the characters unicode.IsPrint accepts that show
// nothing, so that "prod" and "prod" followed by one of them would look
// alike: those Unicode says to ignore when not supported (Hangul fillers,
// the combining grapheme joiner, Khmer inherent vowels), variation
// selectors, and the braille pattern blank.
func blankPrintable(r rune) bool {
	return unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) || unicode.Is(unicode.Variation_Selector, r) || r == '\u2800'
}

// quotedNameRunes bounds how much of a name QuoteName shows.
const quotedNameRunes = 64

// QuoteName renders a name that may be invalid for a message: quoted, with
// invalid bytes and unprintable characters escaped, and cut to its first 64
// characters (marked with "…") so that a hostile name cannot flood a log.
func QuoteName(name string) string {
	cut := false
	n := 0
	for i := range name {
		if n == quotedNameRunes {
			name, cut = name[:i], true
			break
		}
		n++
	}
	q := strconv.QuoteToGraphic(name)
	if cut {
		q += "…"
	}
	return q
}
