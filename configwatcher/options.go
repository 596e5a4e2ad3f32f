package configwatcher

import "github.com/go-logr/logr"

// Each watcher of this package has an option interface of its own
// (FileOption, SecretOption, ClusterAPIOption, ClusterProfileOption,
// KubeFedOption). An option that several watchers take is a type of its
// own whose methods are the option interfaces of exactly those watchers,
// so the compiler, not the constructor at run time, refuses an option
// given to a watcher that has no use for it.

// LoggerOption is the option WithLogger returns. Every watcher of this
// package takes it, so one value can be given to several:
//
//	log := configwatcher.WithLogger(logger)
//	configwatcher.NewFileWatcher(dir, log)
//	configwatcher.NewKubeFedWatcher(host, log)
type LoggerOption struct {
	logger logr.Logger
}

// WithLogger sets the logger of any watcher of this package (the Logger
// field of its options), which receives the watcher's errors and, at V(1),
// every event.
func WithLogger(l logr.Logger) LoggerOption { return LoggerOption{logger: l} }

func (l LoggerOption) applyToFile(o *FileOptions) error {
	o.Logger = l.logger
	return nil
}

func (l LoggerOption) applyToSecret(o *SecretOptions) error {
	o.Logger = l.logger
	return nil
}

func (l LoggerOption) applyToClusterAPI(o *ClusterAPIOptions) error {
	o.Logger = l.logger
	return nil
}

func (l LoggerOption) applyToClusterProfile(o *ClusterProfileOptions) error {
	o.Logger = l.logger
	return nil
}

func (l LoggerOption) applyToKubeFed(o *KubeFedOptions) error {
	o.Logger = l.logger
	return nil
}

// AuthPluginsOption is the option AllowAuthPlugins returns. The watchers
// that read kubeconfig users from a source someone else writes take it:
// FileWatcher, SecretWatcher and ClusterAPIWatcher. ClusterProfileWatcher
// does not, as it runs only the plugins of the operator's access
// providers, and neither does KubeFedWatcher, whose clusters authenticate
// with a token.
type AuthPluginsOption struct{}

// AllowAuthPlugins accepts clusters whose credentials run a program
// (kubeconfig users with exec or auth-provider entries, and in Argo CD's
// format execProviderConfig and awsAuthConfig): it sets the
// AllowAuthPlugins field of FileOptions, SecretOptions or
// ClusterAPIOptions. For a FileWatcher it is
// WithLoadOptions(config.AllowAuthPlugins()).
func AllowAuthPlugins() AuthPluginsOption { return AuthPluginsOption{} }

func (AuthPluginsOption) applyToFile(o *FileOptions) error {
	o.AllowAuthPlugins = true
	return nil
}

func (AuthPluginsOption) applyToSecret(o *SecretOptions) error {
	o.AllowAuthPlugins = true
	return nil
}

func (AuthPluginsOption) applyToClusterAPI(o *ClusterAPIOptions) error {
	o.AllowAuthPlugins = true
	return nil
}

// Every watcher takes WithLogger; those reading kubeconfig users written
// by others take AllowAuthPlugins.
var (
	_ FileOption           = LoggerOption{}
	_ SecretOption         = LoggerOption{}
	_ ClusterAPIOption     = LoggerOption{}
	_ ClusterProfileOption = LoggerOption{}
	_ KubeFedOption        = LoggerOption{}

	_ FileOption       = AuthPluginsOption{}
	_ SecretOption     = AuthPluginsOption{}
	_ ClusterAPIOption = AuthPluginsOption{}
)

// applyOptions applies opts in order to o, passing over nil ones. apply is
// the option interface's method, as a method expression
// (ClusterAPIOption.applyToClusterAPI, say).
func applyOptions[T comparable, O any](o *O, opts []T, apply func(T, *O) error) error {
	var none T
	for _, opt := range opts {
		if opt == none {
			continue
		}
		if err := apply(opt, o); err != nil {
			return err
		}
	}
	return nil
}
