package config

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// A directory entry that its writer keeps swapping between a regular file
// and a symlink to a kubeconfig outside the directory: the check and the
// read are one step (LoadDirectoryEntry), so the outside file's cluster
// never joins, whichever comes between them; each load reads the regular
// file or refuses the link.
func TestDirectoryEntrySwappedForALinkAfterItsCheck(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "admin.conf")
	writeFile(t, outside, kubeconfig(t, ctxSpec{"outside-admin", "https://127.0.0.1:1", "outside-token"}))
	dir := t.TempDir()
	entry := filepath.Join(dir, "cluster")
	inside := kubeconfig(t, ctxSpec{"inside", "https://127.0.0.1:2", "t"})
	writeFile(t, entry, inside)

	var stop atomic.Bool
	done := make(chan struct{})
	go func() { // the directory's writer
		defer close(done)
		reg, lnk := filepath.Join(dir, ".reg"), filepath.Join(dir, ".lnk")
		for i := 0; !stop.Load(); i++ {
			if i%2 == 0 {
				_ = os.WriteFile(reg, inside, 0o600)
				_ = os.Rename(reg, entry)
			} else {
				_ = os.Symlink(outside, lnk)
				_ = os.Rename(lnk, entry)
			}
		}
	}()
	defer func() { stop.Store(true); <-done }()

	var read, refused, other int
	for begin := time.Now(); time.Since(begin) < 3*time.Second || read == 0 || refused == 0; {
		if time.Since(begin) > time.Minute {
			t.Fatalf("in a minute, %d loads read the file and %d refused the link; want both", read, refused)
		}
		cfgs, err := LoadDirectoryEntry(entry)
		for _, c := range cfgs {
			if c.Name != "inside" {
				t.Fatalf("the link out of the directory was read: cluster %q joined", c.Name)
			}
		}
		var fe *FileError
		switch {
		case err == nil:
			read++
		case !errors.As(err, &fe) || fe.Path != entry:
			t.Fatalf("error names no file, or another: %v", err)
		case errors.Is(err, ErrFileReferenceRefused):
			refused++
		default:
			// Between the writer's two steps: gone, or a link that is a
			// file again by the time it is resolved.
			other++
		}
	}
	t.Logf("%d loads read the regular file, %d refused the link, %d met the swap halfway", read, refused, other)
}
