package cmd

import (
	"log/slog"
	"os"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
)

// setupLog is the logger of a main's own messages, as kubebuilder names it.
var setupLog = ctrl.Log.WithName("setup")

// NewLogger logs to standard error through log/slog, which needs nothing
// beyond the standard library; any logr.Logger works (kubebuilder's zap
// setup too). It writes JSON lines when jsonLogs is set, text otherwise,
// and logs V(n) messages for n up to verbosity.
func NewLogger(jsonLogs bool, verbosity int) logr.Logger {
	opts := &slog.HandlerOptions{Level: slog.Level(-verbosity)}
	if jsonLogs {
		return logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, opts))
	}
	return logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, opts))
}

// ExitOnError does nothing when err is nil. Otherwise it logs err with
// msg and keysAndValues on the "setup" logger and exits 1.
func ExitOnError(err error, msg string, keysAndValues ...any) {
	if err != nil {
		setupLog.Error(err, msg, keysAndValues...)
		os.Exit(1)
	}
}
