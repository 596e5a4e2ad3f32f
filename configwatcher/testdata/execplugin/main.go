// Command execplugin is a client-go exec credential plugin
// (client.authentication.k8s.io/v1) for the ClusterProfileWatcher tests,
// which build it. It needs the cluster info (provideClusterInfo): the
// cluster's config, from the ClusterProfile's
// client.authentication.k8s.io/exec extension, names the cluster
// ({"clusterName": "..."}), and the plugin hands out the token the test
// wrote to <dir>/<clusterName>.token, valid for the seconds in
// <dir>/<clusterName>.ttl if that file exists. Every run appends a line
// to <dir>/<clusterName>.log saying what it received and a digest of the
// token it gave, never the token.
//
// Usage: execplugin --dir DIR [--provider NAME] [extra args...]
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

type execCredential struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		Cluster *struct {
			Server string          `json:"server"`
			CAData []byte          `json:"certificate-authority-data"`
			Config json.RawMessage `json:"config"`
		} `json:"cluster"`
	} `json:"spec"`
}

// record is one line of the log.
type record struct {
	Provider    string          `json:"provider"`
	Args        []string        `json:"args"`
	Server      string          `json:"server"`
	HasCA       bool            `json:"hasCA"`
	Config      json.RawMessage `json:"config"`
	TokenDigest string          `json:"tokenDigest"`
	Env         string          `json:"env"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "execplugin:", err)
		os.Exit(1)
	}
}

func run() error {
	var dir, provider string
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "--dir" && i+1 < len(args):
			i++
			dir = args[i]
		case strings.HasPrefix(args[i], "--provider="):
			provider = strings.TrimPrefix(args[i], "--provider=")
		}
	}
	if dir == "" {
		return errors.New("no --dir")
	}
	var in execCredential
	if err := json.Unmarshal([]byte(os.Getenv("KUBERNETES_EXEC_INFO")), &in); err != nil {
		return fmt.Errorf("KUBERNETES_EXEC_INFO: %w", err)
	}
	if in.APIVersion != "client.authentication.k8s.io/v1" || in.Spec.Cluster == nil {
		return errors.New("KUBERNETES_EXEC_INFO holds no v1 cluster info (provideClusterInfo off?)")
	}
	var cc struct {
		ClusterName string `json:"clusterName"`
	}
	if err := json.Unmarshal(in.Spec.Cluster.Config, &cc); err != nil || cc.ClusterName == "" || strings.ContainsAny(cc.ClusterName, `/\.`) {
		return errors.New("spec.cluster.config names no cluster (the client.authentication.k8s.io/exec extension)")
	}
	base := filepath.Join(dir, cc.ClusterName)
	raw, err := os.ReadFile(base + ".token")
	if err != nil {
		return err
	}
	token := strings.TrimSpace(string(raw))
	sum := sha256.Sum256([]byte(token))
	line, err := json.Marshal(record{
		Provider:    provider,
		Args:        args,
		Server:      in.Spec.Cluster.Server,
		HasCA:       len(in.Spec.Cluster.CAData) > 0,
		Config:      in.Spec.Cluster.Config,
		TokenDigest: hex.EncodeToString(sum[:8]),
		Env:         os.Getenv("EXECPLUGIN_EXTRA"),
	})
	if err != nil {
		return err
	}
	f, err := os.OpenFile(base+".log", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(line, '\n'))
	if err := errors.Join(err, f.Close()); err != nil {
		return err
	}

	status := map[string]any{"token": token}
	if ttl, err := os.ReadFile(base + ".ttl"); err == nil {
		secs, err := strconv.Atoi(strings.TrimSpace(string(ttl)))
		if err != nil {
			return fmt.Errorf("%s.ttl: %w", base, err)
		}
		status["expirationTimestamp"] = time.Now().Add(time.Duration(secs) * time.Second).UTC().Format(time.RFC3339)
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"apiVersion": "client.authentication.k8s.io/v1",
		"kind":       "ExecCredential",
		"status":     status,
	})
}
