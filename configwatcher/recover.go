package configwatcher

import (
	"fmt"

	"github.com/go-logr/logr"

	"github.com/mccr-dev/mccr/internal/safe"
)

// ErrPanic is wrapped by the error of a panic recovered while reading
// outside data (an object, a file). Such data is written by other people:
// a panic on it fails that one object, never the watcher or the process.
var ErrPanic = safe.ErrPanic

// claimSafely reads one object into a claim with read, turning a panic
// into a broken claim of that object: ref and id as the object's, name the
// cluster it served last ("" when none), so that the cluster keeps its last
// good config as with any broken object.
func claimSafely(log logr.Logger, kind, ref, id, lastName string, read func() *claim) (c *claim) {
	err := safe.Call(log, kind+" "+ref, func() error {
		c = read()
		return nil
	})
	if err != nil {
		c = &claim{ref: ref, id: id, name: lastName, err: fmt.Errorf("configwatcher: %w", err)}
	}
	return c
}
