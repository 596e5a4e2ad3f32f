package member

import "sync/atomic"

// What WaitingKinds and UnservedKinds report changes while a member runs:
// a controller starts waiting for a kind, its CRD arrives, a kind is
// refused for the member's scope, an RBAC rule is taken away or granted.
// The member's owner publishes a status of its own that includes those
// reports, and reads the status of a whole fleet at once; asking every
// member on every read would cost it a lock, a sort and allocations per
// member. So the member tells its owner when a report changes
// (OnKindsChanged), and the owner reads the reports then.

// kindsHook calls the function given to OnKindsChanged. Each report calls
// changed after a change, once it has released its own lock, so that the
// function may read the reports (which take only leaf locks). A nil
// *kindsHook does nothing.
type kindsHook struct{ fn atomic.Pointer[func()] }

func (h *kindsHook) changed() {
	if h == nil {
		return
	}
	if fn := h.fn.Load(); fn != nil {
		(*fn)()
	}
}

func (h *kindsHook) set(fn func()) {
	if h == nil {
		return
	}
	if fn == nil {
		h.fn.Store(nil)
		return
	}
	h.fn.Store(&fn)
}

// OnKindsChanged makes fn called each time what WaitingKinds or
// UnservedKinds return may have changed, after the change, with no lock of
// the member held: fn may call both. It replaces the function given
// before; nil stops the calls. A change made before fn was given is not
// told: read the reports after giving it. Calls come from the member's
// informer and controller goroutines, possibly several at once and in any
// order, so fn should read the reports afresh rather than count calls, and
// return quickly. A Manager made by New, not Build, reports no kinds and
// never calls fn.
func (m *Manager) OnKindsChanged(fn func()) { m.kinds.set(fn) }
