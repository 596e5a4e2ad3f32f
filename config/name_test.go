package config

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// Names as inventories and cloud CLIs write them pass the gate.
func TestValidateNameAccepts(t *testing.T) {
	for _, name := range []string{
		"east",
		"kind-kind",
		"arn:aws:eks:eu-west-1:123456789012:cluster/prod",
		"gke_my-project_europe-west1-b_prod",
		"admin@east",
		"in-cluster",
		"my cluster",
		"Ωmega-クラスタ",
		strings.Repeat("a", MaxNameLength),
	} {
		if err := ValidateName(name); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", name, err)
		}
	}
}

// Hostile shapes are refused with ErrInvalidName, and the message never
// carries the odd bytes themselves.
func TestValidateNameRefuses(t *testing.T) {
	for _, name := range []string{
		"",
		"evil-\xff\xfe",
		"east\xff",
		"\xc0\x80", // overlong NUL
		"a\nb",
		"a\rb",
		"a\x00b",
		"a\x1b[31mred",
		"a\tb",
		"tail\u202e",      // bidi override
		"zero\u200bwidth", // zero-width space
		"line\u2028sep",
		"nbsp\u00a0x",
		// Printable, and showing nothing: "prod" and these look alike.
		"prod\u3164",     // Hangul filler
		"prod\uffa0",     // halfwidth Hangul filler
		"prod\u115f",     // Hangul choseong filler
		"prod\u034f",     // combining grapheme joiner
		"prod\u2800",     // braille pattern blank
		"prod\ufe0f",     // variation selector
		"prod\U000e0100", // variation selector supplement
		"prod\u17b4",     // Khmer inherent vowel
		" leading",
		"trailing ",
		"\x7f",
		strings.Repeat("a", MaxNameLength+1),
		strings.Repeat("é", MaxNameLength), // 2 bytes each
	} {
		err := ValidateName(name)
		if !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidName", name, err)
			continue
		}
		msg := err.Error()
		if !utf8.ValidString(msg) || strings.ContainsAny(msg, "\n\r\x00\x1b\u202e\u200b\u2028") {
			t.Errorf("ValidateName(%q): message %q carries the odd bytes", name, msg)
		}
		if len(msg) > 200+len(ErrInvalidName.Error()) {
			t.Errorf("ValidateName of a %d-byte name: message of %d bytes", len(name), len(msg))
		}
	}
}

func TestQuoteName(t *testing.T) {
	for in, want := range map[string]string{
		"east":                  `"east"`,
		"evil-\xff":             `"evil-\xff"`,
		"a\u202eb":              `"a\u202eb"`,
		strings.Repeat("x", 70): `"` + strings.Repeat("x", 64) + `"…`,
	} {
		if got := QuoteName(in); got != want {
			t.Errorf("QuoteName(%q) = %s, want %s", in, got, want)
		}
	}
}

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"east", "evil-\xff\xfe", "a\u202eb", " x", "arn:aws:eks:eu-west-1:1:cluster/p"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidateName(name)
		q := QuoteName(name)
		if !utf8.ValidString(q) {
			t.Fatalf("QuoteName(%q) is not valid UTF-8", name)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidName) || !utf8.ValidString(err.Error()) {
				t.Fatalf("ValidateName(%q) = %v", name, err)
			}
			return
		}
		// What passes is safe wherever a name goes.
		if !utf8.ValidString(name) || len(name) == 0 || len(name) > MaxNameLength || strings.ContainsAny(name, "\n\r\x00") {
			t.Fatalf("ValidateName accepted %q", name)
		}
	})
}
