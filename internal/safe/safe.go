// Package safe keeps panics caused by outside data inside the object or
// event that caused them.
//
// Cluster inventories (kubeconfig files, Secrets, Argo CD, Cluster API,
// ClusterProfile and KubeFed objects) are written by other people. Every
// goroutine that works on such data defers Recover around one object or
// event: a panic then fails that one piece, is reported as an error naming
// it (with the stack in the log), and the goroutine goes on with the rest.
package safe

import (
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/go-logr/logr"

	"github.com/mccr-dev/mccr/config"
)

// ErrPanic is wrapped by the error of a recovered panic.
var ErrPanic = errors.New("recovered from a panic")

// Recover is deferred directly (recover works only there): it turns a
// panic into an error stored in *err, naming what was being worked on
// (e.g. "Secret argocd/prod"), and logs the stack. The panic value passes
// through config.Redact, in case it quotes a credential.
//
//	func read(obj) (err error) {
//		defer safe.Recover(log, "Secret "+ref, &err)
//		...
//	}
func Recover(log logr.Logger, what string, err *error) {
	r := recover()
	if r == nil {
		return
	}
	*err = fmt.Errorf("%s: %w: %s", what, ErrPanic, config.Redact(fmt.Sprint(r)))
	if log.GetSink() != nil {
		log.Error(*err, "panic on outside data; going on without it", "stack", string(debug.Stack()))
	}
}

// Call runs f, returning a panic in it as Recover's error.
func Call(log logr.Logger, what string, f func() error) (err error) {
	defer Recover(log, what, &err)
	return f()
}
