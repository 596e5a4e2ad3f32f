package server

import "sync"

// statusBuffers holds the slices of statuses the Server's own readers of
// the whole fleet (the fleet page, SetupReadyCheck) use for the length of
// a call, *[]ClusterStatus each: at 10,000 members a slice is 2.8 MB,
// which a new one per call would have the process fetch from the system
// again on every readiness check or page view. The pool lets go of them
// as garbage collections pass, and with them what they still point to.
var statusBuffers sync.Pool

// withStatuses calls fn with every member's status, as Statuses returns
// them, in a buffer that fn must not keep.
func (s *Server) withStatuses(fn func([]ClusterStatus)) {
	bp, _ := statusBuffers.Get().(*[]ClusterStatus)
	if bp == nil {
		bp = new([]ClusterStatus)
	}
	buf := s.AppendStatuses((*bp)[:0])
	fn(buf)
	*bp = buf[:0]
	statusBuffers.Put(bp)
}
