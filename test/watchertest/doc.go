// Package watchertest checks that a configwatcher.ConfigWatcher keeps the
// rules a Server relies on, whatever source it watches: a conformance kit
// for the authors of watchers, the built-in ones included.
//
// A watcher's author describes their source once, as a Harness whose
// NewSource makes a fresh, empty Source for each check (a namespace of
// its own, a directory of its own). A Source writes clusters the way the
// tools that own the source write them, and makes a watcher of it:
//
//	func TestConformance(t *testing.T) {
//		watchertest.Run(t, watchertest.Harness{
//			NewSource: func(t *testing.T) watchertest.Source { return newMySource(t) },
//		})
//	}
//
// Run then checks, each in a subtest with a watcher of its own:
//
//   - JoinBeforeStart, JoinAfterStart: the clusters a source holds when
//     the watcher starts, and those written later, are each Added exactly
//     once, with a config that reaches them (Source.Reaches) and whose
//     config.Source names their object;
//   - Rotation: new credentials are exactly one Updated, whose config
//     carries them and reaches the cluster;
//   - NoOpUpdates: a status heartbeat, an annotation nobody reads, the
//     same content written again are no event (configs are compared by
//     content, see config.NamedConfig.Fingerprint);
//   - Removal: a deleted cluster is Deleted by name, the others stay;
//   - Rejoin: Added, Updated, Deleted, and Added again under the name;
//   - Broken: a broken object is an error naming it, and its cluster keeps
//     its last good config (no Deleted, no Updated); repaired as it was, it
//     is no event; an object broken from the start never joins;
//   - HostileNames, for a Source that is a NameWriter: names that
//     config.ValidateName refuses (too long, not UTF-8, line breaks,
//     escapes, bidi overrides, zero-width characters, spaces at the ends,
//     empty) are an error naming the object, with the name escaped and
//     cut, and no event; names it lets through, those that look like paths
//     among them, are published exactly as written; a good cluster beside
//     them sees nothing of it;
//   - Stop, StopWithUnreadEvents, UnreadErrors, StopAtOnce: Stop returns
//     however often and concurrently it is called, with events unread,
//     with the errors of many broken clusters unread, or right after the
//     watcher was made; both channels are closed once it has returned; no
//     goroutine of the watcher is left (goleak); errors nobody reads hold
//     no event up.
//
// Throughout, every event is held to the rules of every event: a Config
// with a name, a complete rest.Config in Added and Updated, and per name
// Added before Updated before Deleted, one Added per join. A Source that
// is a SecretHolder has its credentials looked for in every error and
// every config's source description; none may quote them.
//
// A failure reads as a user would report it: what the kit did to the
// source, what it expected, and what came instead, naming the cluster and
// listing the errors the watcher reported meanwhile.
//
// The kit waits for what must happen up to Harness.Patience and watches
// for what must not happen for Harness.Quiet; set them for the source's
// pace (a debounce, a resync, an API server on a busy machine). Its own
// dependencies are the standard library, goleak and mccr's config and
// configwatcher packages; what a Source needs (a fleet of API servers from
// package test, say) is the harness's.
package watchertest
