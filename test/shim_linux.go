//go:build linux

package test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// On Linux every kube-apiserver and etcd of a fleet is started through a
// shim: envtest runs, instead of the real binary, a symlink named like it
// that points to the running executable (the test binary, or a program
// like `make demo`). That executable, started under such a name next to a
// shimTargetFile, never gets to main: this package's init asks the kernel
// to SIGKILL it when its parent dies (PR_SET_PDEATHSIG, which survives
// exec), records its pid and command line for fault injection, and execs
// the real binary in its place. So the API servers and etcds of a fleet
// die with the process that started them, however it ends: SIGKILL, go
// test -timeout, a panic. envtest starts them in process groups of their
// own, out of reach of a terminal's Ctrl-C, and offers no hook to set
// Pdeathsig itself.
const shimTargetFile = "mccr-shim-target"

func init() {
	base := filepath.Base(os.Args[0])
	if base != "kube-apiserver" && base != "etcd" {
		return
	}
	dir := filepath.Dir(os.Args[0])
	raw, err := os.ReadFile(filepath.Join(dir, shimTargetFile)) //nolint:gosec // G703: next to our own executable
	if err != nil {
		return // a binary of that name, but not started by a fleet
	}
	runShim(dir, base, raw)
}

// runShim never returns.
func runShim(dir, base string, target []byte) {
	lines := strings.Split(strings.TrimSpace(string(target)), "\n")
	if len(lines) != 2 {
		shimFailf("malformed %s", shimTargetFile)
	}
	parent, err := strconv.Atoi(lines[1])
	if err != nil {
		shimFailf("malformed %s: %v", shimTargetFile, err)
	}
	// The parent-death signal belongs to the thread that sets it, and
	// exec keeps it on the thread that execs: both must be this one.
	runtime.LockOSThread()
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0); errno != 0 {
		shimFailf("prctl(PR_SET_PDEATHSIG): %v", errno)
	}
	// The parent may have died before the signal was armed.
	if os.Getppid() != parent {
		os.Exit(1)
	}
	path := filepath.Join(lines[0], base)
	argv := append([]string{path}, os.Args[1:]...)
	if err := errors.Join(
		writeShimFile(dir, base+".pid", []byte(strconv.Itoa(os.Getpid()))),
		writeShimFile(dir, base+".args", []byte(strings.Join(argv, "\x00"))),
	); err != nil {
		shimFailf("%v", err)
	}
	err = syscall.Exec(path, argv, os.Environ()) //nolint:gosec // G702: the binary the fleet was told to run
	shimFailf("exec %s: %v", path, err)
}

func shimFailf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "mccr test shim: "+format+"\n", args...)
	os.Exit(127)
}

// writeShimFile writes aside and renames, so a reader never sees half.
func writeShimFile(dir, name string, data []byte) error {
	tmp := filepath.Join(dir, "."+name)
	if err := os.WriteFile(tmp, data, 0o600); err != nil { //nolint:gosec // G703: the shim's own directory
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name)) //nolint:gosec // G703: the shim's own directory
}

// prepareShim makes dir the binary directory envtest starts the cluster's
// processes from: links to this executable under the real binaries' names
// and the file that names realDir. It returns "" when the running
// executable cannot be found; the real binaries are then started directly.
func prepareShim(dir, realDir string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil //nolint:nilerr // no shim: start the binaries as they are
	}
	realDir, err = filepath.Abs(realDir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if err := os.Symlink(exe, filepath.Join(dir, b)); err != nil {
			return "", err
		}
	}
	target := fmt.Sprintf("%s\n%d\n", realDir, os.Getpid())
	if err := os.WriteFile(filepath.Join(dir, shimTargetFile), []byte(target), 0o600); err != nil {
		return "", err
	}
	return dir, nil
}

// shimProcess reads the pid and command line the shim recorded for base.
func shimProcess(dir, base string) (pid int, argv []string, err error) {
	raw, err := os.ReadFile(filepath.Join(dir, base+".pid"))
	if err != nil {
		return 0, nil, fmt.Errorf("test: %s was not started through the kit's shim: %w", base, err)
	}
	pid, err = strconv.Atoi(string(raw))
	if err != nil {
		return 0, nil, fmt.Errorf("test: %s pid: %w", base, err)
	}
	raw, err = os.ReadFile(filepath.Join(dir, base+".args"))
	if err != nil {
		return 0, nil, fmt.Errorf("test: %s command line: %w", base, err)
	}
	return pid, strings.Split(string(raw), "\x00"), nil
}

// dieWithParent makes a process the kit starts itself die with this one.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
