// Package retryafter keeps client-go from sending a write again on its own
// after a server error.
//
// client-go's REST client sends any request again, a POST included, when
// the answer is a 429 or a 5xx with a Retry-After header. A 429 says the
// request was not processed; a 5xx does not: a gateway in front of the API
// server (a load balancer, an auth proxy) may answer 502, 503 or 504 after
// the API server applied the write, and the second send of a Create with
// generateName makes a second object. Wrap drops Retry-After from server
// errors answering writes, so that the caller gets the error and decides
// (mccr's fan-out client calls it ErrOutcomeUnknown: read before retrying).
// Reads, and 429s, are retried as client-go does.
package retryafter
