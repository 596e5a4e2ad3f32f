package member

import "context"

// runContext is the runnables' context: it ends with its Context
// (Start's end), with that context's error, deadline and cause, and
// carries the values of values (BaseContext's) alone, as controller-
// runtime's runnables see theirs. Unlike controller-runtime's, it does not
// end with BaseContext's context: the Server's never ends.
//
// The runnables' cancelable context, derived from it, is linked to its
// Context directly, as to any parent of the context package's own: Value
// answers the package's lookup of that parent's cancel state with the
// parent itself. Start's end then reaches the runnables in the goroutine
// that ends it. (Had the lookup failed, the context package would relay
// the end through a goroutine of its own, which TestRunContext would
// notice.)
type runContext struct {
	context.Context
	values context.Context
}

// Value is the parent context itself when the context package asks for
// it (its own lookup key, which nothing else answers with the context
// itself), and values' value for any other key.
func (l runContext) Value(key any) any {
	if v := l.Context.Value(key); v == any(l.Context) {
		return v
	}
	return l.values.Value(key)
}
