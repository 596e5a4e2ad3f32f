package shard

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Labels and annotations of the sharding Leases.
const (
	// GroupLabel selects a Group's Leases. Its value is GroupKey(Group): a
	// label value cannot hold any string, so two Groups could map to one
	// value only by a hash collision, and GroupAnnotation settles even that.
	GroupLabel = "mccr.dev/shard-group"
	// RoleLabel tells a replica's Lease (RoleReplica) from a cluster's
	// (RoleCluster).
	RoleLabel   = "mccr.dev/shard-role"
	RoleReplica = "replica"
	RoleCluster = "cluster"
	// GroupAnnotation holds the Group exactly; a Lease whose annotation is
	// not the Group, byte for byte, is none of the Group's business.
	GroupAnnotation = "mccr.dev/shard-group"
	// ClusterAnnotation holds a cluster Lease's cluster name exactly.
	ClusterAnnotation = "mccr.dev/cluster"
	// WriterAnnotation holds a random value new for each process, written
	// with every renewal and claim: a replica tells its own writes from
	// those of another process that uses the same Identity.
	WriterAnnotation = "mccr.dev/shard-writer"
	// LeavingAnnotation marks the Lease of a replica that stops: the others
	// no longer assign it anything.
	LeavingAnnotation = "mccr.dev/leaving"
	// ReleasedAnnotation marks a cluster's Lease its holder released: it
	// holds the resourceVersion of the claim released. A Lease without a
	// holder and without it (a hand edit, a restored copy of an old
	// release) is not taken as released by a replica that saw it held.
	ReleasedAnnotation = "mccr.dev/shard-released"
	// StandbyAnnotation marks the Lease of a replica that takes no cluster
	// for now, and says why (another process writes its Lease).
	StandbyAnnotation = "mccr.dev/shard-standby"
	// PinsAnnotation holds PinsKey of the Pins a replica follows. Pins
	// count only while every live replica follows the same: replicas that
	// disagree on them (a rolling update that changes them) would each
	// leave a pinned cluster to the other. A replica of an earlier release
	// writes none, and follows its own Pins as it always did: it counts as
	// agreeing, so that an upgrade keeps them.
	PinsAnnotation = "mccr.dev/shard-pins"
	// LoadFactorAnnotation holds the load factor a replica bounds loads
	// by. Replicas that bound them differently (a rolling update that
	// changes it) would each leave some clusters to another, which gives
	// them back: while the live replicas differ on it, every one uses
	// DefaultLoadFactor. A replica of an earlier release writes none, and
	// counts as agreeing.
	LoadFactorAnnotation = "mccr.dev/shard-load-factor"
)

// PinsKey is a digest of pins, "none" for none.
func PinsKey(pins map[string]string) string {
	if len(pins) == 0 {
		return "none"
	}
	keys := slices.Sorted(maps.Keys(pins))
	var b strings.Builder
	for _, k := range keys {
		// Lengths first: no two maps write the same string.
		fmt.Fprintf(&b, "%d:%s=%d:%s\n", len(k), k, len(pins[k]), pins[k])
	}
	return digest(b.String(), 32)
}

// GroupKey is the label value and Lease name prefix of a Group: up to 20
// characters of it that a Lease name may hold, for people to read, and a
// hash of the whole string, so that Groups that differ anywhere — past any
// length, in case, in punctuation — never share a Lease.
func GroupKey(group string) string {
	return readable(group, 20, "g") + "-" + digest(group, 16)
}

// What follows GroupKey and a dash in a replica's and a cluster's Lease
// name.
const (
	replicaInfix = "r-"
	clusterInfix = "c-"
)

// ReplicaLeaseName is the name of replica id's Lease in group.
func ReplicaLeaseName(group, id string) string {
	return GroupKey(group) + "-" + replicaInfix + readable(id, 30, "r") + "-" + digest(id, 16)
}

// ClusterLeaseName is the name of cluster name's Lease in group.
func ClusterLeaseName(group, name string) string {
	return GroupKey(group) + "-" + clusterInfix + readable(name, 30, "c") + "-" + digest(name, 20)
}

// readable keeps, of s, lower case letters, digits and single dashes, at
// most n of them, starting and ending with a letter or digit; def when
// nothing is left.
func readable(s string, n int, def string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
		default:
			dash = true
		}
		if b.Len() >= n {
			break
		}
	}
	out := strings.TrimRight(b.String()[:min(b.Len(), n)], "-")
	if out == "" {
		return def
	}
	return out
}

// digest is the first n hex digits of s's SHA-256.
func digest(s string, n int) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])[:n]
}
