package configwatcher

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/apis/clusterinventory"
	"github.com/mccr-dev/mccr/config"
)

// ClusterProfileHealthyCondition is the condition of a ClusterProfile that
// its cluster manager sets True while the cluster's control plane is
// healthy.
const ClusterProfileHealthyCondition = clusterinventory.ConditionControlPlaneHealthy

// ClusterProfileJoinedCondition is the condition of a ClusterProfile that
// its cluster manager sets False once the cluster has left its inventory,
// or is leaving it (KEP-4322's Joined: the cluster is under management).
const ClusterProfileJoinedCondition = clusterinventory.ConditionJoined

// clusterProfile is the part of a ClusterProfile the watcher reads.
type clusterProfile struct {
	ref    string // namespace/name
	ident  ClusterProfileIdentity
	status clusterProfileStatus
	// created is the profile's creationTimestamp.
	created time.Time
}

// clusterProfileStatus is a ClusterProfile's status, as far as read.
type clusterProfileStatus struct {
	Conditions []struct {
		Type   string `json:"type"`
		Status string `json:"status"`
	} `json:"conditions,omitempty"`
	Properties []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"properties,omitempty"`
	AccessProviders     []profileAccess `json:"accessProviders,omitempty"`
	CredentialProviders []profileAccess `json:"credentialProviders,omitempty"`
}

// profileAccess is one of a profile's status.accessProviders: a provider
// name, and the cluster as a kubeconfig's clusters entry describes it.
type profileAccess struct {
	Name    string         `json:"name"`
	Cluster profileCluster `json:"cluster"`
}

// profileCluster is client-go's clientcmd v1 Cluster.
type profileCluster struct {
	Server                   string `json:"server"`
	TLSServerName            string `json:"tls-server-name,omitempty"`
	InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify,omitempty"`
	CertificateAuthority     string `json:"certificate-authority,omitempty"`
	CertificateAuthorityData []byte `json:"certificate-authority-data,omitempty"`
	ProxyURL                 string `json:"proxy-url,omitempty"`
	DisableCompression       bool   `json:"disable-compression,omitempty"`
	Extensions               []struct {
		Name      string          `json:"name"`
		Extension json.RawMessage `json:"extension"`
	} `json:"extensions,omitempty"`
}

// readClusterProfile reads a ClusterProfile out of the cache. The profile
// is returned, its ref and identity set, along with an error when its
// status does not parse.
func readClusterProfile(u *unstructured.Unstructured) (*clusterProfile, error) {
	cp := &clusterProfile{
		ref: u.GetNamespace() + "/" + u.GetName(),
		ident: ClusterProfileIdentity{
			Namespace: u.GetNamespace(),
			Name:      u.GetName(),
			Labels:    u.GetLabels(),
			MemberID:  u.GetLabels()[clusterinventory.LabelInventoryMemberID],
		},
		created: u.GetCreationTimestamp().Time,
	}
	if status, ok := u.Object["status"]; ok {
		raw, err := json.Marshal(status)
		if err == nil {
			err = json.Unmarshal(raw, &cp.status)
		}
		if err != nil {
			// encoding/json quotes at most a character of the input.
			return cp, fmt.Errorf("%w: its status does not parse: %s", ErrClusterProfileInvalid, config.Redact(err.Error()))
		}
	}
	if len(cp.status.Properties) > 0 {
		cp.ident.Properties = make(map[string]string, len(cp.status.Properties))
		for _, p := range cp.status.Properties {
			cp.ident.Properties[p.Name] = p.Value
		}
	}
	return cp, nil
}

// condition is the status of the profile's condition typ ("True", "False",
// "Unknown"), "" if the profile has none.
func (cp *clusterProfile) condition(typ string) string {
	for _, c := range cp.status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

// healthy tells whether the profile's ControlPlaneHealthy condition is True.
func (cp *clusterProfile) healthy() bool {
	return cp.condition(ClusterProfileHealthyCondition) == "True"
}

// left tells whether the profile's Joined condition is False: its cluster
// manager says the cluster is no longer, or soon no longer, under its
// management. A profile without the condition (its manager predates it) or
// with Unknown has not left.
func (cp *clusterProfile) left() bool {
	return cp.condition(ClusterProfileJoinedCondition) == "False"
}

// joined tells whether the profile's Joined condition is True.
func (cp *clusterProfile) joined() bool {
	return cp.condition(ClusterProfileJoinedCondition) == "True"
}

// member is the key of the inventory member the profile stands for: its
// member ID (LabelInventoryMemberID) when it has one, so that profiles of
// one cluster from several cluster managers are one member, and else the
// profile itself. The two forms never collide: a label value holds no
// ':' and a namespace/name no ':' either.
func (cp *clusterProfile) member() string {
	if cp.ident.MemberID != "" {
		return "member-id:" + cp.ident.MemberID
	}
	return cp.ref
}

// properties is what the profile says about its cluster beyond how to
// reach it: its labels under LabelPropertyPrefix, and its
// status.properties, each bounded as labelProperties bounds labels (they
// are copied into every Status), except that ClusterIDProperty and
// ClusterSetProperty are taken before the other status properties, so
// that the cut keeps them; and ClusterProfileProperty, its own name. A
// property whose name starts with LabelPropertyPrefix is a label's; a
// status property of such a name is left out.
func (cp *clusterProfile) properties() map[string]string {
	var status map[string]string
	if len(cp.ident.Properties) > 0 {
		meta := make(map[string]string, len(cp.ident.Properties))
		for name, value := range cp.ident.Properties {
			if !strings.HasPrefix(name, LabelPropertyPrefix) {
				meta[name] = value
			}
		}
		status = make(map[string]string, min(len(meta), maxMetaProperties))
		addMetaPropertiesFirst(status, meta, ClusterIDProperty, ClusterSetProperty)
	}
	return mergeProperties(status, labelProperties(cp.ident.Labels), map[string]string{ClusterProfileProperty: cp.ref})
}

// offersAccess tells whether the profile lists any access provider: until
// its cluster manager has written one, the profile is not finished.
func (cp *clusterProfile) offersAccess() bool {
	return len(cp.status.AccessProviders)+len(cp.status.CredentialProviders) > 0
}

// access picks the provider that reaches the profile's cluster: the first
// of the operator's providers that the profile lists, as the Cluster
// Inventory API's own library does. status.accessProviders win over the
// deprecated status.credentialProviders of the same name.
func (cp *clusterProfile) access(providers []AccessProvider) (*AccessProvider, *profileAccess, error) {
	offered := map[string]*profileAccess{}
	var names []string
	for _, list := range [][]profileAccess{cp.status.CredentialProviders, cp.status.AccessProviders} {
		for i := range list {
			if _, ok := offered[list[i].Name]; !ok {
				names = append(names, list[i].Name)
			}
			offered[list[i].Name] = &list[i]
		}
	}
	for i := range providers {
		if pa, ok := offered[providers[i].Name]; ok {
			return &providers[i], pa, nil
		}
	}
	known := make([]string, 0, len(providers))
	for _, p := range providers {
		known = append(known, p.Name)
	}
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("%w: its status lists no access providers (the operator's: %q)", ErrClusterProfileNoAccessProvider, known)
	}
	slices.Sort(names)
	return nil, nil, fmt.Errorf("%w: it lists %s; the operator's are %q", ErrClusterProfileNoAccessProvider, quoteNames(names), known)
}

// maxQuotedNames is how many of a profile's names an error quotes.
const maxQuotedNames = 8

// quoteNames quotes names a profile gave for an error: the first
// maxQuotedNames, each cut as quoteName cuts it, then how many more there
// are. A profile may list any number of names of any length, and the
// error goes into logs and every Status.
func quoteNames(names []string) string {
	quoted := make([]string, 0, min(len(names), maxQuotedNames))
	for _, n := range names[:min(len(names), maxQuotedNames)] {
		quoted = append(quoted, quoteName(n))
	}
	s := strings.Join(quoted, ", ")
	if more := len(names) - len(quoted); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

// restConfig builds the config that reaches the cluster of pa through
// provider p: the address, CA, TLS server name and proxy that pa's cluster
// gives, and p's exec plugin for the credentials. A profile chooses no
// command and no file: a certificate-authority file is refused. Nor can it
// let anyone on the way receive the plugin's credentials: a server that is
// not https is refused, and insecure-skip-tls-verify is ignored, the
// server's certificate checked all the same (as the Cluster Inventory
// API's own config builder does: it takes the server, CA data and proxy
// alone).
func restConfig(p *AccessProvider, pa *profileAccess) (*rest.Config, error) {
	c := &pa.Cluster
	fail := func(format string, args ...any) (*rest.Config, error) {
		return nil, fmt.Errorf("%w: access provider %q: cluster: %s", ErrClusterProfileInvalid, pa.Name, fmt.Sprintf(format, args...))
	}
	server := strings.TrimSpace(c.Server)
	if server == "" {
		return fail("no server")
	}
	u, err := url.Parse(server)
	if err != nil || u.Host == "" || u.Scheme != "https" {
		return fail("server %s is not an https URL: the plugin's credentials go over TLS alone", config.QuoteAddress(server))
	}
	switch {
	case c.CertificateAuthority != "":
		return fail("certificate-authority names a file; a profile must hold its CA inline (certificate-authority-data), the path would be a file of the controller")
	case len(c.CertificateAuthorityData) > 0 && !x509.NewCertPool().AppendCertsFromPEM(c.CertificateAuthorityData):
		return fail("certificate-authority-data holds no PEM certificate")
	}
	exts := make(map[string]json.RawMessage, len(c.Extensions))
	for _, e := range c.Extensions {
		exts[e.Name] = e.Extension
	}
	exec, err := p.execFor(exts)
	if err != nil {
		return fail("%s", err)
	}
	cfg := &rest.Config{
		Host:               server,
		DisableCompression: c.DisableCompression,
		TLSClientConfig: rest.TLSClientConfig{
			ServerName: c.TLSServerName,
			CAData:     slices.Clone(c.CertificateAuthorityData),
		},
		ExecProvider: exec,
	}
	if c.ProxyURL != "" {
		pu, err := url.Parse(c.ProxyURL)
		if err != nil || pu.Scheme == "" || pu.Host == "" {
			return fail("proxy-url %s is not an absolute URL", config.QuoteAddress(c.ProxyURL))
		}
		cfg.Proxy = http.ProxyURL(pu)
	}
	if err := checkRESTConfig(cfg); err != nil {
		return fail("%s", err)
	}
	return cfg, nil
}
