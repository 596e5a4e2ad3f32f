// Package readme keeps the README honest: its test compiles the quickstart
// program the README shows.
package readme
