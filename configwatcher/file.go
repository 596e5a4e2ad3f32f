package configwatcher

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/safe"
)

// DefaultDebounce is how long a FileWatcher waits for a burst of file
// system events to end before it reads the files again. Editors and the
// kubelet change a kubeconfig with several operations in a row; reading
// after the last one turns them into one event per cluster that changed.
const DefaultDebounce = 100 * time.Millisecond

const (
	// maxWaitFactor bounds debouncing: files are read at the latest this
	// many debounce periods after the first event of a burst that never
	// quiets down.
	maxWaitFactor = 10

	// retryInterval is how soon a watch that could not be set up (say, the
	// parent directory is gone) is tried again.
	retryInterval = time.Second

	// maxExtraDirs bounds the directories watched beyond the watched path
	// itself (its directory, its parent, the links on the way to it): those
	// that directory entries symlink into and those of the files kubeconfigs
	// refer to share it, entries first. A directory full of symlinks into
	// as many sub-directories, or of kubeconfigs naming files in them,
	// cannot use up the user's inotify watches. The files beyond it are
	// read again only when something else changes.
	maxExtraDirs = 256
)

// FileOptions configures a FileWatcher. The zero value is usable; defaults
// are applied by NewFileWatcher.
type FileOptions struct {
	// Debounce is how long to wait after a file system event for more
	// events before reading the files. Defaults to DefaultDebounce.
	Debounce time.Duration

	// AllowAuthPlugins accepts kubeconfig users with exec plugins or
	// auth-provider entries (see config.AllowAuthPlugins). Off by default:
	// whoever can write to the watched directory could otherwise make the
	// controller run programs. Same as passing config.AllowAuthPlugins in
	// LoadOptions.
	AllowAuthPlugins bool

	// LoadOptions are the rules of package config that every file is loaded
	// with: config.AllowAuthPlugins, config.AllowFileReferences. By default
	// a watched kubeconfig may only name files in its own directory.
	LoadOptions []config.LoadOption

	// Logger receives the watcher's errors and, at V(1), every event.
	// Defaults to a logger that discards.
	Logger logr.Logger
}

// FileOption configures a FileWatcher. The options below are
// FileWatcher's alone; NewFileWatcher also takes WithLogger and
// AllowAuthPlugins, which other watchers share (see LoggerOption and
// AuthPluginsOption). Each option's type says which watchers take it, so
// an option given to a watcher that has no use for it (WithDebounce to
// NewSecretWatcher, say) does not compile.
//
// FileOption used to be a func(*FileOptions). An option of your own
// written as such a func is now made a FileOption by FileOptionFunc:
//
//	configwatcher.FileOptionFunc(func(o *configwatcher.FileOptions) { o.Debounce = time.Second })
type FileOption interface {
	applyToFile(*FileOptions) error
}

// FileOptionFunc is a FileOption that sets FileOptions fields itself.
type FileOptionFunc func(*FileOptions)

func (f FileOptionFunc) applyToFile(o *FileOptions) error {
	if f != nil {
		f(o)
	}
	return nil
}

// WithDebounce sets FileOptions.Debounce.
func WithDebounce(d time.Duration) FileOption {
	return FileOptionFunc(func(o *FileOptions) { o.Debounce = d })
}

// WithLoadOptions loads every file with opts, the options of package
// config (config.AllowAuthPlugins, config.AllowFileReferences).
// AllowAuthPlugins and AllowFileReferences are shorthands for it.
func WithLoadOptions(opts ...config.LoadOption) FileOption {
	return FileOptionFunc(func(o *FileOptions) { o.LoadOptions = append(o.LoadOptions, opts...) })
}

// AllowFileReferences is WithLoadOptions(config.AllowFileReferences(roots...)):
// kubeconfigs (and directory entries that are symlinks) may lead into roots,
// or anywhere when none are given. Without it they may only lead into the
// kubeconfig's own directory. Only the FileWatcher takes it: a kubeconfig
// held in an object has no directory of its own, and the other watchers
// refuse file references whatever the options.
func AllowFileReferences(roots ...string) FileOption {
	return WithLoadOptions(config.AllowFileReferences(roots...))
}

func (o *FileOptions) applyDefaults() {
	if o.Debounce <= 0 {
		o.Debounce = DefaultDebounce
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
}

// newFileOptions applies opts in order over the zero value, then the
// defaults.
func newFileOptions(opts []FileOption) (FileOptions, error) {
	o := FileOptions{}
	if err := applyOptions(&o, opts, FileOption.applyToFile); err != nil {
		return o, err
	}
	o.applyDefaults()
	return o, nil
}

// FileWatcher is a ConfigWatcher over a kubeconfig file or a directory of
// kubeconfigs. Every context is a cluster, loaded by the rules of package
// config (config.KubeconfigFiles, config.LoadFile, config.MergeFileConfigs).
//
// It watches with fsnotify and, after each burst of events, reads all the
// files again and compares each cluster's config.NamedConfig.Fingerprint
// with what it reported last, so an event is sent only for a cluster whose
// content changed, however the change was written:
//
//   - editors that write a temporary file and rename it over the original;
//   - Kubernetes Secret and ConfigMap volumes, whose "..data" symlink is
//     swapped to a new timestamped directory;
//   - a single watched file replaced by rename: the parent directory is
//     watched, not the file's inode;
//   - a file that is a symlink into another directory: that directory is
//     watched too;
//   - symlinks anywhere on the way to the watched path or to a file, such
//     as a deploy layout's ".../current/kubeconfigs" whose "current" link
//     is switched, or a chain of links through other directories: the
//     directory holding each link is watched for that link, so a switch
//     gives one Updated per changed context;
//   - the watched directory removed (its clusters are Deleted) and created
//     again (they come back as Added): the parent directory is watched to
//     notice.
//
// A watched directory is untrusted input. Its files are listed and loaded
// by the rules of package config: hidden entries and editor or backup files
// ("#x#", "x~", "x.swp", "x.bak", "x.orig", "x.tmp", "4913", …; see
// config.SkippedName) are skipped; an entry that is a symlink out of the
// directory, and a kubeconfig whose certificate, key or token file lies
// outside its own directory, are refused (config.ErrFileReferenceRefused)
// without being opened, unless AllowFileReferences names the place; exec
// and auth-provider users are refused unless AllowAuthPlugins.
//
// A cluster name belongs to the file it is first served from. Another file
// defining the same context later is the conflict (config.ErrDuplicateContext
// naming it as the loser and the owner as the file that keeps it) and takes
// over only when the owner goes away or its drop of the context has settled
// (below). At start-up, the file whose path sorts first wins.
//
// A file that cannot be read or parsed, or that has no contexts (an editor
// truncating it before writing), is reported on Errors and its last good
// clusters are kept: to remove clusters, remove their contexts or the file.
// A file whose "contexts" is written out empty ("contexts: null" or
// "contexts: []", as "kubectl config delete-context" of the last context
// leaves it) has no contexts on purpose: its clusters are Deleted once that
// has settled (below).
// Likewise a context that stops loading (a missing CA file, say) keeps its
// last good config.
//
// A file caught half-written often still parses, its later contexts
// missing. So a file that stops defining contexts it serves keeps them
// until it has read the same (size, modification time and what it loads
// to) across reads a settle period apart: ten times Debounce, 1s by
// default. A writer that pauses mid-write for less than that takes nothing
// away, and does not hand a name to another file defining it. Contexts
// added or changed are taken at once, and a removed file's clusters go at
// once. What this cannot catch: a writer that pauses for longer, and a cut
// that parses into changed values of the contexts it keeps. Write
// kubeconfigs atomically (a temporary file renamed over the original), as
// the kubelet's Secret and ConfigMap volumes do; kubectl rewrites its file
// in place with a single write, which the debounce covers.
//
// Each problem is reported once, when it appears; it is
// reported again if it goes away and comes back.
//
// Files that a kubeconfig refers to (CA, client certificate and key, token
// file) and that mccr reads itself — by default: they must lie in the
// kubeconfig's directory — are watched too (config.NamedConfig.FilesRead):
// their directories, sub-directories included, and the symlinks on the way
// to them, each for the referenced names only. A file rotated in place, by
// rename or through a "..data" swap, or removed and created again, makes the
// watcher read the kubeconfigs again: an Updated event for each cluster
// whose content changed; a file that became unreadable is reported, naming
// it, and the cluster keeps its last good config. A reference dropped from
// the kubeconfigs stops being watched.
//
// Watches are bounded: beyond the watched path's own directories, at most
// 256 directories are watched for the directories that entries symlink into
// and for referenced files together, entries first. Past that bound no
// entry or reference adds more (a problem on Errors says so, naming the
// first entry left out), and the files they lead to are read again only
// when something else changes. Files that
// AllowFileReferences leaves to client-go are not watched: client-go reads
// them itself.
//
// Sources (config.Source.File) name files by absolute path, as found under
// the watched path, not through symlinks.
type FileWatcher struct {
	root     string
	opts     FileOptions
	loadOpts []config.LoadOption
	log      logr.Logger

	fsw *fsnotify.Watcher
	pub *publisher // the Events and Errors channels, what was published

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}

	// The rest belongs to the run goroutine.
	rootIsDir  bool
	watched    map[string]os.FileInfo
	filter     watchSet // which events of each watched directory matter
	retryWatch bool
	readAgain  bool      // a watch was set up after the files it covers were read
	settleAt   time.Time // when the earliest pending drop may settle; zero if none
	refs       []string  // filesRead as of the last sync: the referenced files watched
	files      map[string]*fileState
	reported   map[string]bool
	owners     map[string]string // cluster name → the file it is served from
}

var _ ConfigWatcher = (*FileWatcher)(nil)

// fileState is what one file last contributed.
type fileState struct {
	good map[string]*config.NamedConfig
	// read are the files its configs, the good ones and the contexts that
	// failed, were read from (config.NamedConfig.FilesRead), watched so
	// that a rotated token or certificate is read again.
	read []string
	// dropping is set while the file's content drops contexts it serves:
	// what it was when that was first read, and when. The drop is applied
	// once the file has read the same for the settle period.
	dropping *pendingDrop
}

// pendingDrop is a file's content that drops served contexts, waiting to
// settle.
type pendingDrop struct {
	seen  fileSeen
	since time.Time
}

// fileSeen is what tells one version of a file from another: its size and
// modification time, before and after it was loaded, and a digest of what
// loading it gave (each context's name and config.NamedConfig.Fingerprint,
// and the errors).
type fileSeen struct {
	size, mtime           int64
	sizeAfter, mtimeAfter int64
	digest                [sha256.Size]byte
}

// stable says whether the file did not change while it was loaded.
func (s fileSeen) stable() bool { return s.size == s.sizeAfter && s.mtime == s.mtimeAfter }

// NewFileWatcher watches fileOrDir, which must exist, and starts reporting
// its clusters: first all of them as Added, then changes. Call Stop to end
// it.
func NewFileWatcher(fileOrDir string, opts ...FileOption) (*FileWatcher, error) {
	o, err := newFileOptions(opts)
	if err != nil {
		return nil, err
	}

	root, err := filepath.Abs(fileOrDir)
	if err != nil {
		return nil, fmt.Errorf("configwatcher: cannot watch %s: %w", fileOrDir, err)
	}
	fi, err := os.Stat(root)
	if err != nil {
		if pe, ok := errors.AsType[*fs.PathError](err); ok {
			err = pe.Err
		}
		return nil, fmt.Errorf("configwatcher: cannot watch %s: %w", fileOrDir, err)
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("configwatcher: cannot watch %s: %w", fileOrDir, err)
	}

	log := o.Logger.WithValues("path", root)
	w := &FileWatcher{
		root:      root,
		opts:      o,
		log:       log,
		fsw:       fsw,
		pub:       newPublisher(log),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		rootIsDir: fi.IsDir(),
		watched:   map[string]os.FileInfo{},
		files:     map[string]*fileState{},
		reported:  map[string]bool{},
		owners:    map[string]string{},
	}
	w.loadOpts = append(w.loadOpts, o.LoadOptions...)
	if o.AllowAuthPlugins {
		w.loadOpts = append(w.loadOpts, config.AllowAuthPlugins())
	}
	go w.run()
	return w, nil
}

// Events delivers cluster changes. Read it: events are never dropped, so an
// unread Events channel stalls the watcher once its buffer is full. It is
// closed after Stop.
func (w *FileWatcher) Events() <-chan Event { return w.pub.events }

// Errors delivers problems with the files, each naming the file (and
// context). Reading it is optional: the latest errors are buffered and, once
// the buffer is full, the oldest are dropped (all are logged). It is closed
// after Stop.
func (w *FileWatcher) Errors() <-chan error { return w.pub.errors }

// Stop ends the watcher. It returns once the watcher's goroutine has ended
// and both channels are closed; calling it again does nothing more.
func (w *FileWatcher) Stop() {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
}

func (w *FileWatcher) run() {
	defer func() {
		if err := w.fsw.Close(); err != nil {
			w.log.Error(err, "closing the file system watcher")
		}
		w.pub.close()
		close(w.done)
	}()

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var burstStart time.Time // zero when no read is scheduled
	schedule := func(wait time.Duration) {
		now := time.Now()
		if burstStart.IsZero() {
			burstStart = now
		}
		if latest := burstStart.Add(maxWaitFactor * w.opts.Debounce); now.Add(wait).After(latest) {
			wait = max(latest.Sub(now), 0)
		}
		timer.Reset(wait)
	}

	again := func() {
		wait := time.Duration(-1)
		switch {
		case w.readAgain:
			wait = w.opts.Debounce
		case w.retryWatch:
			wait = retryInterval
		}
		if !w.settleAt.IsZero() {
			// Read again when a pending drop may settle.
			if d := max(time.Until(w.settleAt), 0); wait < 0 || d < wait {
				wait = d
			}
		}
		if wait >= 0 {
			schedule(wait)
		}
	}
	if !w.sync() {
		return
	}
	again()
	fsEvents, fsErrors := w.fsw.Events, w.fsw.Errors
	for {
		select {
		case <-w.stop:
			return
		case ev, ok := <-fsEvents:
			if !ok {
				fsEvents = nil
				continue
			}
			if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
				// A watched directory that is removed or moved away may be
				// back before the next read, possibly with the same inode
				// number: forget its watch so that the read sets it up anew.
				delete(w.watched, ev.Name)
			}
			if w.relevant(ev) {
				schedule(w.opts.Debounce)
			}
		case err, ok := <-fsErrors:
			if !ok {
				fsErrors = nil
				continue
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// Events were lost; reading everything again catches up.
				schedule(w.opts.Debounce)
			}
			w.pub.report(fmt.Errorf("configwatcher: watching %s: %w", w.root, err))
		case <-timer.C:
			burstStart = time.Time{}
			if !w.sync() {
				return
			}
			again()
		}
	}
}

// relevant filters the events of directories watched only for some of
// their entries: the root's parent (to see the root come and go), the
// directories holding the symlinks on the way to the root, its files and
// the files they refer to, and the directories of those referenced files.
// Everything else may change what the files say.
func (w *FileWatcher) relevant(ev fsnotify.Event) bool {
	if _, ok := w.filter[ev.Name]; ok {
		return true // a watched directory itself
	}
	names, ok := w.filter[filepath.Dir(ev.Name)]
	return !ok || names == nil || names[filepath.Base(ev.Name)]
}

// sync reads the files, updates the watches, and sends the events and new
// errors that follow. It returns false if the watcher was stopped meanwhile.
func (w *FileWatcher) sync() bool {
	var problems []error
	files, listErr := config.KubeconfigFiles(w.root)
	gone := errors.Is(listErr, fs.ErrNotExist)
	switch {
	case gone:
		files = nil
		problems = append(problems, fmt.Errorf("configwatcher: %s does not exist; its clusters are removed until it is back", w.root))
	case listErr != nil:
		// Unreadable for now (permissions, say): keep what we know.
		problems = append(problems, listErr)
	}
	if fi, err := os.Stat(w.root); err == nil {
		w.rootIsDir = fi.IsDir()
	}
	// Watch before reading, so that a change made while reading is seen;
	// the referenced files are those of the last read.
	w.readAgain = false
	refs := w.refs
	problems = append(problems, w.updateWatches(files, refs)...)
	// A file created between the listing and the watch above sent no event
	// (the first sync races with a caller writing files right after
	// NewFileWatcher returns): list again now that the watch is in place.
	if listErr == nil {
		if again, err := config.KubeconfigFiles(w.root); err == nil && !slices.Equal(again, files) {
			files = again
			problems = append(problems, w.updateWatches(files, refs)...)
		}
	}

	loaded := make([]config.FileConfigs, 0, len(files))
	seen := make(map[string]bool, len(files))
	w.settleAt = time.Time{}
	for _, f := range files {
		select {
		case <-w.stop:
			return false
		default:
		}
		var cfgs []*config.NamedConfig
		// A panic on one file's content fails that file only (it keeps its
		// last good clusters, as any broken file does).
		load := config.LoadFile
		if w.rootIsDir {
			load = config.LoadDirectoryEntry
		}
		var look fileSeen
		if fi, err := os.Stat(f); err == nil {
			look.size, look.mtime = fi.Size(), fi.ModTime().UnixNano()
		}
		err := safe.Call(w.log, "configwatcher: kubeconfig "+f, func() (err error) {
			cfgs, err = load(f, w.loadOpts...)
			return err
		})
		if len(cfgs) == 0 && errors.Is(err, fs.ErrNotExist) {
			continue // removed since it was listed
		}
		if fi, err := os.Stat(f); err == nil {
			look.sizeAfter, look.mtimeAfter = fi.Size(), fi.ModTime().UnixNano()
		}
		look.digest = loadDigest(cfgs, err)
		seen[f] = true
		st := w.files[f]
		if st == nil {
			st = &fileState{}
			w.files[f] = st
		}
		served := func(name string) bool { return w.owners[name] == f }
		st.update(cfgs, err, served, look, time.Now(), w.settle())
		if st.dropping != nil {
			if at := st.dropping.since.Add(w.settle()); w.settleAt.IsZero() || at.Before(w.settleAt) {
				w.settleAt = at
			}
		}
		loaded = append(loaded, config.FileConfigs{Path: f, Configs: st.configs(), Err: err})
	}
	for f, st := range w.files {
		if seen[f] {
			continue
		}
		if listErr != nil && !gone {
			loaded = append(loaded, config.FileConfigs{Path: f, Configs: st.configs()})
			continue
		}
		delete(w.files, f)
	}
	// The kubeconfigs may name other files now: watch those (and stop
	// watching the ones no longer named). One that was read before its
	// watch was in place may have changed meanwhile unseen: read again.
	now := w.filesRead()
	w.refs = now
	if !slices.Equal(now, refs) {
		before := w.filter
		problems = append(problems, w.updateWatches(files, now)...)
		w.readAgain = !before.covers(w.filter)
	}

	// A name already served stays with its file: a newcomer defining it is
	// the conflict, whatever its path.
	merged, err := config.MergeFileConfigsKeeping(loaded, w.owners)
	problems = appendFlat(problems, err)
	w.reportNew(problems)
	desired := make(map[string]*config.NamedConfig, len(merged))
	owners := make(map[string]string, len(merged))
	for _, c := range merged {
		desired[c.Name] = c
		owners[c.Name] = c.Source.File
	}
	if !w.pub.apply(desired, w.stop) {
		return false
	}
	w.owners = owners
	return true
}

// settle is how long a file's content that drops contexts it serves must
// read the same before the drop is applied: as long as the longest a burst
// of events is debounced, 1s by default.
func (w *FileWatcher) settle() time.Duration { return maxWaitFactor * w.opts.Debounce }

// update takes a file's new load result, read at now as look, keeping the
// last good config of whatever failed to load: a broken file keeps all its
// clusters, a broken context keeps its own. A served context (see served)
// that the file no longer defines is kept too, until the file has been
// read the same (look) for settle: a file caught mid-write often parses,
// with its later contexts missing, and a writer that finishes within
// settle takes nothing away. Contexts added or changed are taken at once.
func (st *fileState) update(cfgs []*config.NamedConfig, err error, served func(string) bool, look fileSeen, now time.Time, settle time.Duration) {
	perContext := map[string]bool{}
	var read []string
	for _, e := range appendFlat(nil, err) {
		fe, ok := errors.AsType[*config.FileError](e)
		if !ok || fe.Context == "" {
			st.dropping = nil
			return // the whole file failed
		}
		perContext[fe.Context] = true
		read = append(read, fe.FilesRead()...)
	}
	next := make(map[string]*config.NamedConfig, len(cfgs))
	for _, c := range cfgs {
		next[c.Name] = c
	}
	for name := range perContext {
		if old, ok := st.good[name]; ok {
			next[name] = old
		}
	}
	var dropped []string
	for name := range st.good {
		if _, ok := next[name]; !ok && served(name) {
			dropped = append(dropped, name)
		}
	}
	switch {
	case len(dropped) == 0:
		st.dropping = nil
	case st.dropping == nil || st.dropping.seen != look || !look.stable():
		st.dropping = &pendingDrop{seen: look, since: now}
		fallthrough
	case now.Sub(st.dropping.since) < settle:
		for _, name := range dropped {
			next[name] = st.good[name]
		}
	default:
		st.dropping = nil // settled: the file means it
	}
	st.good = next

	for _, c := range next {
		read = append(read, c.FilesRead()...)
	}
	st.read = read
}

// loadDigest sums up what loading a file gave.
func loadDigest(cfgs []*config.NamedConfig, err error) [sha256.Size]byte {
	h := sha256.New()
	for _, c := range cfgs {
		fmt.Fprintf(h, "%q %s\n", c.Name, c.Fingerprint())
	}
	if err != nil {
		fmt.Fprintf(h, "error %q\n", err.Error())
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// filesRead lists, sorted, the files that the files' configs were read
// from.
func (w *FileWatcher) filesRead() []string {
	var out []string
	for _, st := range w.files {
		out = append(out, st.read...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (st *fileState) configs() []*config.NamedConfig {
	out := make([]*config.NamedConfig, 0, len(st.good))
	for _, c := range st.good {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *config.NamedConfig) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// watchSet maps a directory (its real path) to the entries whose events
// matter there; a nil set means every event does.
type watchSet map[string]map[string]bool

func (ws watchSet) all(dir string) { ws[dir] = nil }

// covers says whether ws lets through every event that other does.
func (ws watchSet) covers(other watchSet) bool {
	for dir, names := range other {
		mine, ok := ws[dir]
		switch {
		case !ok:
			return false
		case mine == nil:
			continue
		case names == nil:
			return false
		}
		for name := range names {
			if !mine[name] {
				return false
			}
		}
	}
	return true
}

func (ws watchSet) entry(dir, name string) {
	names, ok := ws[dir]
	if ok && names == nil {
		return
	}
	if !ok {
		names = map[string]bool{}
		ws[dir] = names
	}
	names[name] = true
}

// missing counts the directories of other that ws does not hold.
func (ws watchSet) missing(other watchSet) int {
	n := 0
	for dir := range other {
		if _, ok := ws[dir]; !ok {
			n++
		}
	}
	return n
}

// merge adds every directory and name of other to ws.
func (ws watchSet) merge(other watchSet) {
	for dir, names := range other {
		if names == nil {
			ws.all(dir)
			continue
		}
		for name := range names {
			ws.entry(dir, name)
		}
	}
}

// countLinks counts the symlinks among files.
func countLinks(files []string) int {
	n := 0
	for _, f := range files {
		if fi, err := os.Lstat(f); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			n++
		}
	}
	return n
}

// maxLinks bounds the symlinks followed on one path, as the kernel does.
const maxLinks = 40

// follow resolves the absolute path p one component at a time, adding to ws
// the directory and name of every symlink met on the way (a deploy layout
// whose "current" link is switched, a chain of links through other
// directories), and, where p stops resolving, the last directory that
// exists and the name missing in it. It returns the real path.
func (ws watchSet) follow(p string) (string, error) {
	sep := string(filepath.Separator)
	cur := filepath.VolumeName(p) + sep
	rest := strings.Split(strings.TrimPrefix(p, cur), sep)
	links := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if err != nil {
			ws.entry(cur, c)
			return next, err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		ws.entry(cur, c)
		if links++; links > maxLinks {
			return next, errors.New("too many levels of symbolic links")
		}
		target, err := os.Readlink(next)
		if err != nil {
			return next, err
		}
		if filepath.IsAbs(target) {
			cur = filepath.VolumeName(target) + sep
			target = strings.TrimPrefix(target, cur)
		}
		rest = append(strings.Split(target, sep), rest...)
	}
	return cur, nil
}

// updateWatches follows the whole watched path: the directory (or the
// single file's directory), its parent (to see it replaced, removed or
// created), the directories that symlinked files lead into, the
// directories of the files refs that the kubeconfigs refer to (for those
// names only; where one does not resolve, the last directory on its way
// that exists, for the missing name), and every directory holding a
// symlink on the way to any of them, so that switching a link anywhere on
// the way is seen. Directories are watched by their real paths; one
// replaced by another of the same name is watched again. What is no longer
// on the way is no longer watched.
func (w *FileWatcher) updateWatches(files, refs []string) []error {
	var problems []error
	w.retryWatch = false
	ws := watchSet{}
	if resolved, err := ws.follow(w.root); err == nil {
		if fi, err := os.Stat(resolved); err == nil && fi.IsDir() {
			ws.all(resolved)
			ws.entry(filepath.Dir(resolved), filepath.Base(resolved))
		} else {
			ws.all(filepath.Dir(resolved))
		}
	}
	realRoot, _ := filepath.EvalSymlinks(w.root)
	base := len(ws)
	for i, f := range files {
		if fi, err := os.Lstat(f); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			continue // in the root itself
		}
		// Followed on the side, so that an entry whose directories would go
		// over the bound adds none of them.
		one := watchSet{}
		resolved, err := one.follow(f)
		if err == nil && filepath.Dir(resolved) != realRoot {
			one.all(filepath.Dir(resolved))
		}
		if len(ws)+ws.missing(one)-base > maxExtraDirs {
			problems = append(problems, fmt.Errorf("configwatcher: the entries of %s are symlinks into more than %d directories: from %s on, %d of them are not watched for changes, and are read again only when something else changes", w.root, maxExtraDirs, f, countLinks(files[i:])))
			break
		}
		ws.merge(one)
	}
	for i, p := range refs {
		if len(ws)-base >= maxExtraDirs {
			problems = append(problems, fmt.Errorf("configwatcher: the kubeconfigs of %s and their symlinks lead to files in more than %d directories: %d of the files are not watched, and are read again only when something else changes", w.root, maxExtraDirs, len(refs)-i))
			break
		}
		if resolved, err := ws.follow(p); err == nil {
			ws.entry(filepath.Dir(resolved), filepath.Base(resolved))
		}
	}
	desired := make([]string, 0, len(ws))
	for d := range ws {
		desired = append(desired, d)
	}
	slices.Sort(desired)
	w.filter = ws

	keep := map[string]bool{}
	var infos []os.FileInfo
	for _, d := range desired {
		fi, err := os.Stat(d)
		if err == nil && !fi.IsDir() {
			err = errors.New("not a directory")
		}
		if err != nil {
			// Gone since it was followed: the event that removed it
			// schedules another read.
			w.retryWatch = true
			continue
		}
		// The same directory under another name is watched once.
		if slices.ContainsFunc(infos, func(o os.FileInfo) bool { return os.SameFile(o, fi) }) {
			continue
		}
		infos = append(infos, fi)
		keep[d] = true
		if old, ok := w.watched[d]; ok {
			if os.SameFile(old, fi) {
				continue
			}
			_ = w.fsw.Remove(d) // the old directory is gone; so may be its watch
			delete(w.watched, d)
		}
		if err := w.fsw.Add(d); err != nil {
			problems = append(problems, fmt.Errorf("configwatcher: cannot watch %s, retrying: %w", d, err))
			w.retryWatch = true
			delete(keep, d)
			continue
		}
		w.watched[d] = fi
	}
	for d := range w.watched {
		if !keep[d] {
			_ = w.fsw.Remove(d)
			delete(w.watched, d)
		}
	}
	return problems
}

// reportNew reports the problems that were not there at the last read, so
// that a broken file is reported once rather than after every event.
// maxSeparateErrors is how many new problems one read reports one by one;
// more are reported as one error.
const maxSeparateErrors = 8

func (w *FileWatcher) reportNew(problems []error) {
	now := make(map[string]bool, len(problems))
	var fresh []error
	for _, p := range problems {
		msg := p.Error()
		if now[msg] {
			continue
		}
		now[msg] = true
		if !w.reported[msg] {
			fresh = append(fresh, p)
		}
	}
	w.reported = now
	if len(fresh) > maxSeparateErrors {
		// A burst (a directory filling with broken files) becomes one error
		// naming every file, so that none is lost to the bounded Errors
		// channel, whose oldest entries give way when nobody keeps up.
		w.pub.report(fmt.Errorf("configwatcher: %d new problems in %s:\n%w", len(fresh), w.root, errors.Join(fresh...)))
		return
	}
	for _, p := range fresh {
		w.pub.report(p)
	}
}

func appendFlat(errs []error, err error) []error {
	if err == nil {
		return errs
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			errs = appendFlat(errs, e)
		}
		return errs
	}
	return append(errs, err)
}
