package watchertest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
)

// stream reads one watcher's channels for a check, and holds each event to
// the rules every event must keep: a complete config, and per name Added,
// then Updated, then Deleted, one Added per join.
type stream struct {
	t   *testing.T
	h   *Harness
	src Source
	w   configwatcher.ConfigWatcher

	// live holds the names published and not deleted since.
	live map[string]bool
	// written maps the names of the clusters the check wrote to them.
	written map[string]Cluster
	// errs are the errors read so far; unread says Errors is left alone.
	errs   []error
	unread bool
	// stopHung says Stop did not return: it is not called again.
	stopHung bool
}

// newStream makes a fresh source for the check t; start starts its
// watcher.
func newStream(t *testing.T, h *Harness) *stream {
	t.Helper()
	src := h.NewSource(t)
	if src == nil {
		t.Fatal("Harness.NewSource returned no Source")
	}
	return &stream{t: t, h: h, src: src, live: map[string]bool{}, written: map[string]Cluster{}}
}

// start makes the source's watcher and stops it when the check ends.
func (s *stream) start() {
	s.t.Helper()
	w, err := s.src.Watch()
	if err != nil {
		s.t.Fatalf("making the watcher: %v", err)
	}
	if w == nil {
		s.t.Fatal("Source.Watch returned no watcher and no error")
	}
	s.w = w
	s.t.Cleanup(func() {
		if !s.stopHung {
			s.stop("Stop at the end of the check")
		}
	})
}

// want is an event the kit waits for.
type want struct {
	typ  configwatcher.EventType
	name string
}

func (w want) String() string { return w.typ.String() + " " + config.QuoteName(w.name) }

// errorsChan is the Errors channel to read: nil (never ready) when the
// check leaves it unread or the watcher has none.
func (s *stream) errorsChan() <-chan error {
	if s.unread {
		return nil
	}
	return s.w.Errors()
}

// next returns the next event, or false when none comes by deadline.
// Errors read meanwhile are kept.
func (s *stream) next(deadline <-chan time.Time, while string) (configwatcher.Event, bool) {
	s.t.Helper()
	errs := s.errorsChan()
	for {
		select {
		case ev, ok := <-s.w.Events():
			if !ok {
				s.t.Fatalf("%s: Events was closed, and the watcher was not stopped", while)
			}
			s.check(ev, while)
			return ev, true
		case err, ok := <-errs:
			if !ok {
				s.t.Fatalf("%s: Errors was closed, and the watcher was not stopped", while)
			}
			s.keep(err, while)
		case <-deadline:
			return configwatcher.Event{}, false
		}
	}
}

// check holds ev to the rules of every event.
func (s *stream) check(ev configwatcher.Event, while string) {
	s.t.Helper()
	if ev.Config == nil {
		s.t.Fatalf("%s: got a %s event without a Config: every event names its cluster", while, ev.Type)
	}
	name := ev.Config.Name
	q := config.QuoteName(name)
	switch ev.Type {
	case configwatcher.Added:
		if s.live[name] {
			s.t.Fatalf("%s: got Added %s again, without a Deleted since its first Added: a cluster joins once", while, q)
		}
	case configwatcher.Updated:
		if !s.live[name] {
			s.t.Fatalf("%s: got Updated %s before any Added of it: a cluster is Added first", while, q)
		}
	case configwatcher.Deleted:
		if !s.live[name] {
			s.t.Fatalf("%s: got Deleted %s, which was not Added (or was Deleted already)", while, q)
		}
		delete(s.live, name)
		return
	default:
		s.t.Fatalf("%s: got an event of type %s for %s: only Added, Updated and Deleted exist", while, ev.Type, q)
	}
	if ev.Config.Config == nil {
		s.t.Fatalf("%s: got %s %s without a rest.Config: Added and Updated carry the complete config", while, ev.Type, q)
	}
	s.live[name] = true
	s.noSecret(ev.Config.Source.String(), fmt.Sprintf("%s: the source of %s %s", while, ev.Type, q))
}

// keep records err, checking it on the way.
func (s *stream) keep(err error, while string) {
	s.t.Helper()
	if err == nil {
		s.t.Errorf("%s: got a nil error on Errors", while)
		return
	}
	s.noSecret(err.Error(), while+": an error")
	s.errs = append(s.errs, err)
}

// noSecret fails the test if text quotes a credential of the source.
func (s *stream) noSecret(text, what string) {
	s.t.Helper()
	sh, ok := s.src.(SecretHolder)
	if !ok {
		return
	}
	for _, secret := range sh.Secrets() {
		if secret != "" && strings.Contains(text, secret) {
			s.t.Errorf("%s quotes a credential of the source (%d bytes of it): %s", what, len(secret), strings.ReplaceAll(text, secret, "<credential>"))
		}
	}
}

// expect waits for exactly the events wanted, in any order between
// names, and returns them in the order wanted. Any other event fails the
// test.
func (s *stream) expect(while string, wanted ...want) []configwatcher.Event {
	s.t.Helper()
	got := make([]configwatcher.Event, len(wanted))
	found := make([]bool, len(wanted))
	deadline := time.After(s.h.Patience)
	for range wanted {
		ev, ok := s.next(deadline, while)
		if !ok {
			var missing []string
			for i, w := range wanted {
				if !found[i] {
					missing = append(missing, w.String())
				}
			}
			s.t.Fatalf("%s: want %s; %s did not come within %s%s", while, list(wanted), strings.Join(missing, ", "), s.h.Patience, s.errorsSoFar())
		}
		i := s.match(ev, wanted, found)
		if i < 0 {
			s.t.Fatalf("%s: want %s; got %s%s", while, list(wanted), describe(ev), s.errorsSoFar())
		}
		got[i], found[i] = ev, true
		s.sourceNamesObject(ev, while)
	}
	return got
}

func (s *stream) match(ev configwatcher.Event, wanted []want, found []bool) int {
	for i, w := range wanted {
		if !found[i] && w.typ == ev.Type && w.name == ev.Config.Name {
			return i
		}
	}
	return -1
}

// sourceNamesObject checks that an Added or Updated config says which
// object it came from, as the Server quotes it when two sources claim one
// name.
func (s *stream) sourceNamesObject(ev configwatcher.Event, while string) {
	s.t.Helper()
	if ev.Type == configwatcher.Deleted {
		return
	}
	c, ok := s.clusterOf(ev.Config.Name)
	if !ok {
		return
	}
	obj := s.src.Object(c)
	if src := ev.Config.Source.String(); !mentions(src, obj) {
		s.t.Errorf("%s: %s: its config's Source is %q; want it to name %s", while, describe(ev), src, obj)
	}
}

// clusterOf maps a name the watcher publishes back to the cluster the
// kit wrote under it.
func (s *stream) clusterOf(name string) (Cluster, bool) {
	c, ok := s.written[name]
	return c, ok
}

// quiet checks that no event comes for the harness's Quiet.
func (s *stream) quiet(while string) {
	s.t.Helper()
	if ev, ok := s.next(time.After(s.h.Quiet), while); ok {
		s.t.Fatalf("%s: want no event; got %s%s", while, describe(ev), s.errorsSoFar())
	}
}

// awaitError waits for an error that names object; an event meanwhile
// fails the test. A watcher without an Errors channel is not asked for
// one.
func (s *stream) awaitError(while, object string) {
	s.t.Helper()
	for i, err := range s.errs {
		if mentions(err.Error(), object) {
			s.errs = append(s.errs[:i:i], s.errs[i+1:]...)
			return
		}
	}
	if s.w.Errors() == nil {
		s.t.Logf("%s: the watcher has no Errors channel; not checking that it reports %s", while, object)
		return
	}
	deadline := time.After(s.h.Patience)
	for {
		select {
		case ev, ok := <-s.w.Events():
			if !ok {
				s.t.Fatalf("%s: Events was closed, and the watcher was not stopped", while)
			}
			s.check(ev, while)
			s.t.Fatalf("%s: want an error naming %s and no event; got %s", while, object, describe(ev))
		case err, ok := <-s.w.Errors():
			if !ok {
				s.t.Fatalf("%s: Errors was closed, and the watcher was not stopped", while)
			}
			s.keep(err, while)
			if err != nil && mentions(err.Error(), object) {
				s.errs = s.errs[:len(s.errs)-1]
				return
			}
		case <-deadline:
			s.t.Fatalf("%s: want an error naming %s; none came within %s%s", while, object, s.h.Patience, s.errorsSoFar())
		}
	}
}

// noErrors checks that no error was read.
func (s *stream) noErrors(while string) {
	s.t.Helper()
	if len(s.errs) > 0 {
		s.t.Errorf("%s: want no error; got %d:%s", while, len(s.errs), s.errorsSoFar())
	}
}

// errorsSoFar lists the errors read, for a failure message.
func (s *stream) errorsSoFar() string {
	if len(s.errs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nerrors reported meanwhile:")
	for _, err := range s.errs {
		b.WriteString("\n\t")
		b.WriteString(err.Error())
	}
	return b.String()
}

func describe(ev configwatcher.Event) string {
	if ev.Config == nil {
		return ev.Type.String() + " without a Config"
	}
	s := ev.Type.String() + " " + config.QuoteName(ev.Config.Name)
	if src := ev.Config.Source.String(); src != "" {
		s += " (" + src + ")"
	}
	return s
}

func list(wanted []want) string {
	parts := make([]string, len(wanted))
	for i, w := range wanted {
		parts[i] = w.String()
	}
	return strings.Join(parts, ", ")
}

// mentions tells whether text names object as a whole: "Secret ns/a" is
// not named by a message about "Secret ns/a1".
func mentions(text, object string) bool {
	if object == "" {
		return false
	}
	for i := 0; ; {
		j := strings.Index(text[i:], object)
		if j < 0 {
			return false
		}
		end := i + j + len(object)
		if end == len(text) || !nameByte(text[end]) {
			return true
		}
		i += j + 1
	}
}

// nameByte tells whether b may continue an object's name.
func nameByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-' || b == '_'
}
