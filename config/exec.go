package config

import (
	"errors"
	"fmt"

	clientauthenticationv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	clientauthenticationv1beta1 "k8s.io/client-go/pkg/apis/clientauthentication/v1beta1"
	authexec "k8s.io/client-go/plugin/pkg/client/auth/exec"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// CheckExecPlugin returns an error when client-go would refuse to run the
// exec plugin e: no command, an ExecCredential apiVersion it does not
// speak (it speaks client.authentication.k8s.io/v1 and v1beta1), an
// unknown interactive mode or plugin policy. client-go finds that out only
// when it builds the cluster's transport, far from the kubeconfig or object
// that named the plugin; the loaders of this package and the watchers of
// package configwatcher ask first. A nil e is no plugin, and no error. The
// message quotes no setting that may be a credential (args, env values).
func CheckExecPlugin(e *clientcmdapi.ExecConfig) error {
	if e == nil {
		return nil
	}
	switch {
	case e.Command == "":
		return errors.New("exec plugin has no command")
	case e.APIVersion != clientauthenticationv1.SchemeGroupVersion.String() && e.APIVersion != clientauthenticationv1beta1.SchemeGroupVersion.String():
		return fmt.Errorf("exec plugin apiVersion %s is neither %s nor %s", QuoteName(e.APIVersion),
			clientauthenticationv1.SchemeGroupVersion, clientauthenticationv1beta1.SchemeGroupVersion)
	}
	switch e.InteractiveMode {
	case "", clientcmdapi.NeverExecInteractiveMode, clientcmdapi.IfAvailableExecInteractiveMode, clientcmdapi.AlwaysExecInteractiveMode:
	default:
		return fmt.Errorf("exec plugin interactiveMode %s is unknown", QuoteName(string(e.InteractiveMode)))
	}
	if err := authexec.ValidatePluginPolicy(e.PluginPolicy); err != nil {
		return fmt.Errorf("exec plugin policy: %w", err)
	}
	return nil
}
