// Package reach is how a member cluster's connection to its API server is
// watched: the check made before each start, the transport that notices
// requests getting no answer and answers rejecting the credentials, the
// hook every failed list and watch of the member's informers goes through,
// and the periodic probe.
//
// A member whose controllers watch something learns of an outage from its
// watches' errors within a second or two. A member that watches nothing
// (no controllers yet, or controllers on kinds its cluster does not serve)
// makes no request at all, and a hung API server (one that accepts
// connections and never answers) produces no error for as long as the
// watches' own timeouts run. The probe covers both: every running member
// asks its API server for /version, through the member's own connections,
// every Options.Interval, and more often (Options.OutageInterval) once a
// request got no answer. One unanswered probe makes the member
// Unreachable; the first answer after that restarts it, with fresh lists.
//
// A 401 while the member runs is a refusal, not yet a rejection: the
// credential is renewed where it comes from (the exec plugin, the token
// file, the latest Update) and probes follow every OutageInterval; the
// first accepted one ends the refusal, and only one still refused
// RefreshGrace after the first refusal fails the member. A 401 before
// the member runs, and a 403 on discovery, fail it at once.
//
// A Monitor is one start (attempt) of one member. Between probes it holds
// no goroutine: a timer runs each probe when it is due, in the timer's own
// goroutine, which ends with the probe; an idle fleet of thousands costs
// no goroutine for its probes. Probes of the whole fleet share a Limiter,
// so a fleet of thousands never has more than a bounded number of probes
// in flight, whatever the intervals.
package reach
