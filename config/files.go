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
//   - sub-directories are skipped;
//   - symlinks are followed: one to a regular file counts (a mounted
//     Secret's files are symlinks through "..data"), one to anything else
//     or to nothing is skipped, as is anything that is not a regular file
//     (a FIFO would block the reader).
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
		if strings.HasPrefix(e.Name(), ".") {
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
