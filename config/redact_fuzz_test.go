package config

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// FuzzRedactURL feeds server addresses to RedactURL and to Redact, alone
// and quoted in a message as Go's and client-go's errors quote them. When
// the address is a URL with a password (as Go's URL parser, and so
// client-go, reads it), the password is in neither result.
func FuzzRedactURL(f *testing.F) {
	for _, s := range []string{
		"https://admin:s3cretpw@h:6443",
		"https://admin:pw@s3cretpw@h/api",
		"socks5://u:a@s3cretpw@proxy:1080",
		"https://admin:it's-s3cret@h",
		"https://admin:(s3cret)!$&*+,;=~@h",
		"https://admin:%41s3cret@h",
		"https://admin:s3cret@h?token=t0ken&x=1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil || u.User == nil || u.Host == "" {
			return
		}
		i := strings.Index(s, "://")
		if i < 0 {
			return
		}
		// The password as written: what lies after the first ':' of the
		// userinfo, up to the last '@' of the authority.
		authority := s[i+3:]
		if j := strings.IndexAny(authority, "/?#"); j >= 0 {
			authority = authority[:j]
		}
		at := strings.LastIndex(authority, "@")
		if at < 0 {
			return
		}
		_, password, ok := strings.Cut(authority[:at], ":")
		// A password that is found elsewhere in s, or is too short to tell
		// from other text, says nothing.
		if !ok || len(password) < 4 || strings.Count(s, password) != 1 {
			return
		}
		// The same address with another password: what its results hold
		// of the password (re-encoded text that happens to spell it) is
		// not the password's doing.
		other := s[:i+3] + strings.Replace(authority[:at], password, "x", 1) + s[i+3+at:]
		for _, redact := range []func(string) string{
			RedactURL,
			Redact,
			func(s string) string { return Redact(`Get "` + s + `": dial tcp: connection refused`) },
			func(s string) string { return Redact("proxyconnect tcp " + s + " refused") },
		} {
			if got := redact(s); strings.Contains(got, password) && !strings.Contains(redact(other), password) {
				t.Fatalf("the password %q of %q is in %q", password, s, got)
			}
		}
	})
}

// FuzzRedactQuotedValue: a credential of any content, written in a JSON
// document as encoding/json writes it, is replaced whole, and the rest of
// the document stays as it was; so it is when an error quotes the document
// with %q.
func FuzzRedactQuotedValue(f *testing.F) {
	for _, seed := range []string{"s3cr3t", "two words", `say "hi"`, `ends in \`, `\\"`, "it's", "a\nb", "ünïcödé"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		v, err := json.Marshal(value)
		if err != nil {
			return
		}
		doc := `{"password":` + string(v) + `,"user":"admin"}`
		want := `{"password":"REDACTED","user":"admin"}`
		if got := Redact(doc); got != want {
			t.Fatalf("Redact(%s) = %s, want %s", doc, got, want)
		}
		if got, want := Redact(fmt.Sprintf("%q", doc)), fmt.Sprintf("%q", want); got != want {
			t.Fatalf("Redact(%q) = %s, want %s", doc, got, want)
		}
	})
}
