package config

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

var (
	// ErrInvalidKubeconfig is wrapped by every error about a kubeconfig, or a
	// context in one, that cannot be turned into a working *rest.Config:
	// malformed YAML, a context naming a cluster or user that is not there, a
	// cluster without a server, an unreadable certificate file, ….
	ErrInvalidKubeconfig = errors.New("invalid kubeconfig")

	// ErrNoContexts means a kubeconfig defines no context, so it names no
	// cluster. An empty file is such a kubeconfig; the file watcher treats it
	// like any broken file (it keeps the file's last good clusters), because
	// an editor that truncates before writing produces one for a moment. A
	// kubeconfig whose "contexts" is written out as null or [] ("kubectl
	// config delete-context" of the last context writes "contexts: null")
	// says it has none: that is no error, and no configs.
	ErrNoContexts = errors.New("kubeconfig has no contexts")

	// ErrDuplicateContext means two kubeconfig files of one directory define
	// the same context name. Cluster names must be unique in a fleet, so only
	// one of them is used: the one already served from its file (see
	// MergeFileConfigsKeeping), or else the one whose path sorts first.
	ErrDuplicateContext = errors.New("context is defined in more than one kubeconfig")

	// ErrAuthPluginRefused means a context's user has an exec plugin or an
	// auth-provider entry and the caller did not pass AllowAuthPlugins. Both
	// make client-go run code chosen by whoever wrote the file.
	ErrAuthPluginRefused = errors.New("auth plugin refused (exec and auth-provider users need AllowAuthPlugins)")
)

// FileError is a problem with one kubeconfig file, or with one context in it
// when Context is set. Err wraps one of the sentinel errors of this package
// (or an fs error when the file could not be read).
type FileError struct {
	// Path is the file, as it was given or found in its directory.
	Path string
	// Context is the context the problem is about, or "" for the whole file.
	Context string
	// OtherPath is, for ErrDuplicateContext, the file that keeps the context.
	OtherPath string
	// Err is what went wrong.
	Err error

	// read is, for a context that failed, what NamedConfig.FilesRead would
	// have listed as far as it was checked (see FilesRead).
	read []string
}

// FilesRead returns, for a context that failed to load (Context is set),
// the files its kubeconfig named and LoadFile read, or would have read,
// before the problem: those read by the default rule, and the missing or
// unreadable one the problem is about when it lies in the kubeconfig's
// directory (never one that was refused). When one of them changes, loading
// the kubeconfig again may give another result. See NamedConfig.FilesRead.
func (e *FileError) FilesRead() []string {
	if e == nil {
		return nil
	}
	return slices.Clone(e.read)
}

// Error names the file and context. It never quotes the file's content:
// credentials live there; and whatever the wrapped error says passes
// through Redact.
func (e *FileError) Error() string {
	var b strings.Builder
	b.WriteString("kubeconfig ")
	b.WriteString(quoteIfOdd(e.Path))
	if e.Context != "" {
		b.WriteString(", context ")
		b.WriteString(quoteContext(e.Context))
	}
	b.WriteString(": ")
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	} else {
		b.WriteString("unknown error")
	}
	if e.OtherPath != "" {
		b.WriteString(" (also defined in ")
		b.WriteString(quoteIfOdd(e.OtherPath))
		b.WriteString(", which keeps it)")
	}
	return Redact(b.String())
}

// Unwrap lets errors.Is and errors.As see the sentinel.
func (e *FileError) Unwrap() error { return e.Err }

// quoteIfOdd leaves ordinary paths readable and quotes the ones whose names
// could forge or hide log lines (newlines, control characters, bidi
// overrides, bytes that are not UTF-8).
func quoteIfOdd(s string) string {
	if !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// maxQuotedRef bounds how much of a path or an address read from a
// kubeconfig a message shows.
const maxQuotedRef = 256

// quoteRef renders a path or an address read from a kubeconfig for a
// message, as quoteIfOdd does, cut to its first 256 bytes (marked with
// "…"): a kubeconfig may hold a megabyte where a file name goes, and
// repeat it by aliases, and a message must not repeat it too.
func quoteRef(s string) string {
	if len(s) <= maxQuotedRef {
		return quoteIfOdd(s)
	}
	return quoteIfOdd(cutMessage(s, maxQuotedRef, false)) + "…"
}

// quoteContext quotes a context name: whole when it is a valid cluster
// name, as QuoteName does (escaped, shortened) when it is not, so that a
// hostile name cannot flood a message.
func quoteContext(name string) string {
	if ValidateName(name) != nil {
		return QuoteName(name)
	}
	return strconv.Quote(name)
}

var errNotFileOrDir = errors.New("neither a regular file nor a directory")

// bareFSError drops the path from an *fs.PathError, since FileError names
// the file already, and keeps what errors.Is needs (fs.ErrNotExist, …).
func bareFSError(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}
