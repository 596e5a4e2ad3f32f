package config

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func expandHome(path string) (string, error) {
	if path != "~" && !strings.HasPrefix(path, "~/") && !strings.HasPrefix(path, "~"+string(filepath.Separator)) {
		return path, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("expanding %s: %w", path, err)
	}
	return filepath.Join(home, path[1:]), nil
}

// KubeconfigFiles lists the kubeconfig files found at path: path itself when
// it is a regular file (or a symlink to one), or the entries of a directory
// that count as kubeconfigs, sorted by name. Anything else (a FIFO, a
// device) is an error: reading it could block or never end. In a directory
// (not searched recursively):
//
//   - hidden entries, whose names start with ".", are skipped. Kubernetes
//     keeps a mounted volume's real files under "..data" and timestamped
//     "..2006_01_02_15_04_05.000" directories; editors keep swap and backup
//     files there too;
//   - editor and backup files are skipped, as SkippedName describes: names
//     starting with "#", ending with "~" or "#", ending with ".swp", ".swo",
//     ".swx", ".swn", ".bak", ".orig", ".rej", ".tmp", ".temp", ".dpkg-new",
//     ".dpkg-old", ".dpkg-dist", ".rpmnew", ".rpmsave" or ".lock" (the lock
//     kubectl leaves behind when it is killed while writing), the names
//     "4913" (vim's probe for a writable directory) and "sed" followed by
//     six letters or digits ("sed -i"'s temporary file);
//   - sub-directories are skipped;
//   - symlinks are followed: one to a regular file counts (a mounted
//     Secret's files are symlinks through "..data"), one to anything else
//     or to nothing is skipped, as is anything that is not a regular file
//     (a FIFO would block the reader). LoadConfigsFromConfigFile and the
//     file watcher then refuse, unopened, a link that leads out of the
//     directory, and one swapped in since, once opened
//     (LoadDirectoryEntry).
//
// A missing path is an error wrapping fs.ErrNotExist.
func KubeconfigFiles(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, &FileError{Path: path, Err: bareFSError(err)}
	}
	switch {
	case fi.Mode().IsRegular():
		return []string{path}, nil
	case !fi.IsDir():
		return nil, &FileError{Path: path, Err: errNotFileOrDir}
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, &FileError{Path: path, Err: bareFSError(err)}
	}
	var files []string
	for _, e := range entries {
		if SkippedName(e.Name()) {
			continue
		}
		p := filepath.Join(path, e.Name())
		switch {
		case e.Type().IsRegular():
		case e.Type()&fs.ModeSymlink != 0:
			fi, err := os.Stat(p)
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
		default:
			continue
		}
		files = append(files, p)
	}
	return files, nil
}

// editorSuffixes end the names of swap, backup, patch-reject, temporary and
// package-manager leftovers.
var editorSuffixes = []string{
	"~", "#",
	".swp", ".swo", ".swx", ".swn",
	".bak", ".orig", ".rej", ".tmp", ".temp",
	".dpkg-new", ".dpkg-old", ".dpkg-dist", ".rpmnew", ".rpmsave",
	".lock",
}

// SkippedName says whether a directory entry with this name is left out of
// a directory of kubeconfigs: hidden entries (a leading "."), and what
// editors, patch and package managers leave behind — a leading "#" (Emacs
// auto-save "#x#"), a trailing "~" or "#", the suffixes ".swp", ".swo",
// ".swx", ".swn" (vim swap), ".bak", ".orig", ".rej", ".tmp", ".temp",
// ".dpkg-new", ".dpkg-old", ".dpkg-dist", ".rpmnew", ".rpmsave", ".lock"
// (kubectl's "<file>.lock", left behind when kubectl is killed), the name
// "4913" (vim's probe), and "sed" followed by exactly six ASCII letters or
// digits ("sed -i"'s temporary file, "sedAb12Cd"). Suffixes are matched
// case-insensitively. Such a file is a stale or partial copy: loading it
// would serve an old config, or claim a context name that belongs to the
// real file.
func SkippedName(name string) bool {
	if name == "" || name == "4913" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "#") || isSedTemp(name) {
		return true
	}
	lower := strings.ToLower(name)
	for _, suf := range editorSuffixes {
		if strings.HasSuffix(lower, suf) {
			return true
		}
	}
	return false
}

// isSedTemp matches the temporary file GNU sed -i writes next to the file it
// edits: "sed" and six random letters or digits (mkstemp's "sedXXXXXX").
func isSedTemp(name string) bool {
	rest, ok := strings.CutPrefix(name, "sed")
	if !ok || len(rest) != 6 {
		return false
	}
	for _, r := range rest {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}
