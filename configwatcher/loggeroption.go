package configwatcher

import (
	"fmt"
	"reflect"

	"github.com/go-logr/logr"
)

// applyLoggerOnly applies f to the logger of a watcher that shares only
// WithLogger with the FileWatcher. A FileOption that sets anything else is
// refused (ctor names the watcher's constructor) rather than silently
// ignored.
func (f FileOption) applyLoggerOnly(ctor string, log *logr.Logger) error {
	fo := FileOptions{Logger: *log}
	f(&fo)
	*log, fo.Logger = fo.Logger, logr.Logger{}
	if !reflect.DeepEqual(fo, FileOptions{}) {
		return fmt.Errorf("configwatcher: %s: a FileWatcher option other than WithLogger (%+v) does not apply", ctor, fo)
	}
	return nil
}
