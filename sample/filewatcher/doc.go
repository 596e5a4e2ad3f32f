// Command filewatcher runs one ordinary controller-runtime reconciler in
// every cluster found in a kubeconfig file or directory, and follows that
// directory while it runs: a kubeconfig dropped in is a new member, an
// edited one restarts that member only, a removed one (or a context removed
// from a file) stops its member.
//
// Compared with sample/basic, the one-time load and the loop of Server.Add
// become two lines: configwatcher.NewFileWatcher and Server.Watch. The
// directory may be a mounted Secret or ConfigMap; Kubernetes' atomic
// "..data" symlink swaps are followed.
//
//	go run ./sample/filewatcher --kubeconfig host.kubeconfig --clusters ./members/
//	cp east.kubeconfig ./members/     # east joins
//	rm ./members/west.kubeconfig      # west leaves
//
// To add a file without the watcher ever reading it half-written, write it
// under a name starting with "." (hidden files are skipped) and rename it.
// Kubeconfigs whose users run programs (exec, auth-provider) are refused
// unless --allow-auth-plugins is given.
//
// SIGINT or SIGTERM stops the watcher and every member and exits 0.
package main
