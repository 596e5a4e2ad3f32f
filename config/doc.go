// Package config names the clusters of a fleet.
//
// A NamedConfig is a cluster name, the *rest.Config that reaches it, and
// where it came from (a kubeconfig file and context, or an object such as a
// KubeFedCluster), so that every error about a cluster can say where to look.
//
// LoadConfigsFromConfigFile reads one kubeconfig file, or a directory of them,
// and returns one NamedConfig per context, named by the context. The file
// watcher of package configwatcher is built from the same pieces —
// KubeconfigFiles, LoadFile and MergeFileConfigs — so what is accepted and
// refused is the same whether a kubeconfig is loaded once at start-up or
// watched.
//
// # Directories
//
// In a directory every regular file is a kubeconfig, with these exceptions
// chosen so that a Secret or ConfigMap mounted by Kubernetes works as it is:
// entries whose names start with "." are skipped (Kubernetes keeps the real
// files in "..data" and timestamped "..2006_01_02_15_04_05.000" directories,
// and exposes each key as a symlink through "..data"); editor and backup
// files are skipped (SkippedName: "#x#", "x~", "x.swp", "x.bak", "x.orig",
// "x.tmp", "4913", …); sub-directories are skipped; symlinks are followed to
// regular files inside the directory. Files that a kubeconfig of
// the directory names as its CA, client certificate, key or token file are
// data and are not reported as broken kubeconfigs.
//
// Relative file paths inside a kubeconfig are resolved against the directory
// the kubeconfig was found in (not the working directory, and not the target
// of a symlink), which is what keeps a Secret's "ca.crt" next to its "config"
// working across updates.
//
// Each context is a cluster, and a cluster name must be unique: a context
// defined in two files is an error naming both, and the file whose path
// sorts first keeps it.
//
// # Errors
//
// Problems are *FileError values naming the file and context, wrapping
// ErrInvalidKubeconfig, ErrNoContexts, ErrDuplicateContext or
// ErrAuthPluginRefused. One bad file or context does not hide the good ones:
// they are returned together with the error. Error messages never quote a
// kubeconfig's content, which holds credentials.
//
// # Untrusted directories
//
// Whoever can write a directory of kubeconfigs chooses the servers mccr
// talks to, so a directory's kubeconfigs may not reach beyond it: their
// certificate-authority, client-certificate, client-key and tokenFile paths,
// and entries that are symlinks, must resolve inside the directory, or they
// are refused with ErrFileReferenceRefused before anything is opened
// (otherwise a tokenFile naming the controller's own ServiceAccount token
// would send it to any server). Referenced files must be regular files of
// at most 1 MiB; mccr reads them itself, once, and hands client-go their
// content. AllowFileReferences lifts the rule for named places. A single
// file passed to LoadConfigsFromConfigFile is the user's own choice and
// keeps kubectl's behaviour.
//
// Redact, RedactURL, RedactError and NamedConfig.Redacted keep passwords in
// server URLs, tokens and keys out of what is printed.
//
// # Auth plugins
//
// Kubeconfigs found on disk may ask client-go to run programs (exec plugins
// and auth-provider entries). Such users are refused unless the caller opts
// in with AllowAuthPlugins, so that a writable directory is never a way to run
// code in the controller's process.
package config
