package cmd

import (
	"log/slog"
	"os"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
)

// SetupLog is the logger of a main's own messages: kubebuilder's setupLog.
var SetupLog = ctrl.Log.WithName("setup")

// Logger logs to standard error through log/slog, which needs nothing
// beyond the standard library; any logr.Logger works (kubebuilder's zap
// setup too). It writes JSON lines with --log-json, text otherwise, and
// logs V(n) messages for n up to --verbosity.
func (f *Flags) Logger() logr.Logger {
	opts := &slog.HandlerOptions{Level: slog.Level(-f.Verbosity)}
	if f.JSONLogs {
		return logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, opts))
	}
	return logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, opts))
}

// ExitOnError does nothing when err is nil. Otherwise it logs err with
// msg and keysAndValues on SetupLog and exits 1.
func ExitOnError(err error, msg string, keysAndValues ...any) {
	if err != nil {
		SetupLog.Error(err, msg, keysAndValues...)
		os.Exit(1)
	}
}
