// Package shard assigns cluster names to replicas: consistent hashing with
// bounded loads, so that each replica carries at most ceil(LoadFactor ×
// average) clusters and a replica joining or leaving moves few of them.
// The assignment is a pure function of the live replicas, the names and
// the pins, so every replica that sees the same inputs computes the same
// owners without talking to the others.
package shard
