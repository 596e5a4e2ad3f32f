// Package leanmapper is a REST mapper that discovers only the
// group-versions it is asked about.
//
// controller-runtime's dynamic REST mapper reads the discovery of every
// group the API server serves (aggregated /api and /apis) the first time
// it maps a kind, and keeps a mapping of all of them: some 275 KiB of heap
// per API server, plus the decoding and the server's work of producing the
// whole document, to map the one or two kinds a member's controllers use.
//
// A Mapper asked for a kind in a group-version (the way controller-runtime
// always asks: its cache, client and handlers pass the version of the Go
// type or of the object) fetches that group-version's resource list alone,
// GET /api/v1 or /apis/<group>/<version>, and keeps a compact copy of its
// resources (names, kind, scope; no verbs, short names or categories),
// for good. A lookup without a version (RESTMapping with none, KindFor
// or ResourceFor with an empty version) first reads the list of groups,
// /apis in its plain (not aggregated) form, kept for a few seconds, to find
// the group's versions, preferred first; the core group has only v1.
//
// Answers that something is not served are not kept for long, so that a
// CRD installed after a controller asked for its kind is found within
// seconds (a member's controller waits for such a kind by asking again;
// see internal/member): a group-version the server answers 404 for is
// asked again after negativeTTL at the latest, and a kind missing from a
// known group-version makes the mapper fetch that group-version again,
// at most once per negativeTTL. Errors other than 404 are not kept at all.
// The kind or resource not served is reported as a *meta.NoKindMatchError
// or *meta.NoResourceMatchError, which meta.IsNoMatchError recognises.
//
// Concurrent lookups of one group-version share one request. Requests run
// with no lock held, bounded by the HTTP client's timeout.
//
// Kinds are matched as client-go's discovery REST mapper matches them: the
// kind, its lower-case form, "<Kind>List" (controller-runtime asks about
// lists so) and "List", the last two mapped to a guessed resource.
//
// Differences from client-go's discovery REST mapper: the group of a lookup is
// taken as given (an empty group is the core group, not "any group"),
// KindFor and ResourceFor do not know the guessed resources of list kinds,
// and ResourceSingularizer knows only the resources of group-versions
// already fetched.
package leanmapper
