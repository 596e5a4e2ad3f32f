package watchertest

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
)

// maxErrorLength bounds an error about a hostile name: the name must be
// cut, not quoted whole.
const maxErrorLength = 4096

// hostileName is a cluster name an object may hold, and what is odd
// about it.
type hostileName struct{ name, why string }

// hostileNames are what the kit names clusters with through a
// NameWriter. config.ValidateName, the one gate for cluster names, says
// which a watcher must refuse (with an error naming the object, and no
// event) and which it must publish as they are: names that look like
// paths are names, not paths.
var hostileNames = []hostileName{
	{strings.Repeat("x", config.MaxNameLength+1), "one byte longer than config.MaxNameLength"},
	{strings.Repeat("y", 100_000), "100 000 bytes"},
	{"evil-\xff\xfe", "bytes that are not UTF-8"},
	{"prod\nlevel=error msg=forged", "a line break that would forge a log line"},
	{"nul\x00", "a NUL byte"},
	{"esc\x1b[2J", "a terminal escape"},
	{"prod\u202egpj.exe", "a bidi override"},
	{"pr\u200bod", "a zero-width space"},
	{" padded", "a leading space"},
	{"padded ", "a trailing space"},
	{"", "the empty name"},
	{strings.Repeat("z", config.MaxNameLength), "exactly config.MaxNameLength bytes"},
	{"../../../etc/passwd", "a relative path out of a directory"},
	{"/etc/passwd", "an absolute path"},
	{`C:\Windows\System32`, "a Windows path"},
	{"ns/name", "a namespace and a name"},
}

// hostileNamesCheck: each hostile name the gate refuses is an error naming its
// object, quoting the name escaped and cut, and no event; each it lets
// through is published as it is; a good cluster beside them sees nothing
// of it and still follows its changes.
func hostileNamesCheck(t *testing.T, h *Harness) {
	s := newStream(t, h)
	nw, ok := s.src.(NameWriter)
	if !ok {
		t.Logf("not checked: the source is no NameWriter (it names clusters after its objects' own names, which the API server or the file system checks first)")
		return
	}
	good := cluster("good")
	s.write(good)
	s.start()
	s.expect("good written before the watcher started", s.added(good))

	refused := map[string]hostileName{} // by object
	var accepted []want
	for i, hn := range hostileNames {
		c := cluster(fmt.Sprintf("hostile-%02d", i))
		if !s.writeNamed(nw, c, hn.name) {
			t.Logf("the source cannot hold %s (%s) as it is: not checked", config.QuoteName(hn.name), hn.why)
			continue
		}
		if config.ValidateName(hn.name) != nil {
			refused[s.src.Object(c)] = hn
		} else {
			accepted = append(accepted, want{typ: configwatcher.Added, name: hn.name})
		}
	}

	if s.w.Errors() == nil {
		t.Logf("the watcher has no Errors channel: not checking that it reports the %d names it must refuse", len(refused))
		clear(refused)
	}
	// The refusals and the names let through, in any order.
	const while = "clusters written under hostile names"
	named := map[string]error{}
	found := make([]bool, len(accepted))
	deadline := time.After(h.Patience)
	for len(named) < len(refused) || countFalse(found) > 0 {
		select {
		case ev, ok := <-s.w.Events():
			if !ok {
				t.Fatalf("%s: Events was closed, and the watcher was not stopped", while)
			}
			s.check(ev, while)
			i := s.match(ev, accepted, found)
			if i < 0 {
				t.Fatalf("%s: got %s; want %s, and no other event (the names the gate refuses are no cluster)", while, describe(ev), list(accepted))
			}
			found[i] = true
		case err, ok := <-s.errorsChan():
			if !ok {
				t.Fatalf("%s: Errors was closed, and the watcher was not stopped", while)
			}
			s.keep(err, while)
			// One error may name several objects (a watcher that reports
			// what one read of its source found, say).
			for obj := range refused {
				if _, done := named[obj]; !done && err != nil && mentions(err.Error(), obj) {
					named[obj] = err
				}
			}
		case <-deadline:
			var missing []string
			for obj, hn := range refused {
				if named[obj] == nil {
					missing = append(missing, fmt.Sprintf("an error naming %s, which names its cluster with %s", obj, hn.why))
				}
			}
			for i, w := range accepted {
				if !found[i] {
					missing = append(missing, w.String())
				}
			}
			t.Fatalf("%s: not within %s: %s%s", while, h.Patience, strings.Join(missing, "; "), s.errorsSoFar())
		}
	}
	s.quiet(while + ", then refused or Added")
	for obj, err := range named {
		if problem := unsafeText(err.Error(), refused[obj].name); problem != "" {
			t.Errorf("the error about %s (%s) %s: %.200q", obj, refused[obj].why, problem, err.Error())
		}
	}

	good.Credentials = 1
	s.write(good)
	ev := s.expect("good's credentials rotated after the hostile names", s.updated(good))
	s.reaches("good's credentials rotated after the hostile names", ev[0].Config, good)
}

// unsafeText says what is wrong with msg, a message about name: it must
// be valid UTF-8, carry none of name's unprintable characters raw (a line
// break between two problems is no harm, the name's own one is), and stay
// short.
func unsafeText(msg, name string) string {
	switch {
	case !utf8.ValidString(msg):
		return "is not valid UTF-8"
	case len(msg) > maxErrorLength:
		return fmt.Sprintf("is %d bytes long: a long name must be cut", len(msg))
	}
	for i, r := range name {
		if r == utf8.RuneError || unicode.IsPrint(r) {
			continue
		}
		// The character with what surrounds it in the name.
		from, to := max(0, i-3), min(len(name), i+utf8.RuneLen(r)+3)
		if strings.Contains(msg, name[from:to]) {
			return fmt.Sprintf("carries the name's character %U raw", r)
		}
	}
	return ""
}

func countFalse(bs []bool) int {
	n := 0
	for _, b := range bs {
		if !b {
			n++
		}
	}
	return n
}
