#!/usr/bin/env bash
# usercheck: build a fresh module that imports every public package of mccr,
# the way a user's module does, and check that `go mod tidy`, `go build` and
# `go vet` work in it. mccr comes from this checkout through a replace
# directive; every other module from the module cache or the configured
# proxy. A dependency whose module breaks tidy for users (as KubeFed's did)
# fails here.
set -euo pipefail

GO=${GO:-go}
repo=$(cd "$(dirname "$0")/.." && pwd)
module=$(cd "$repo" && $GO list -m)
goversion=$(cd "$repo" && $GO mod edit -json | sed -n 's/^[[:space:]]*"Go": "\(.*\)",*$/\1/p')

# Public: every non-main package with non-test files, outside internal/, hack/, sample/ and the
# project's own end-to-end suites.
mapfile -t pkgs < <(cd "$repo" && $GO list -e -f '{{if and (ne .Name "main") .GoFiles}}{{.ImportPath}}{{end}}' ./... |
	grep -v -e '/internal\(/\|$\)' -e '/hack/' -e '/sample\(/\|$\)' -e '/test/e2e' | sort)
if [ ${#pkgs[@]} -eq 0 ]; then
	echo "usercheck: no public packages found" >&2
	exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mccr-usercheck.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

cat > "$tmp/go.mod" <<MOD
module example.com/mccr-user

go $goversion

require $module v0.0.0

replace $module => $repo
MOD
# Known sums let tidy run without asking the checksum database.
cp "$repo/go.sum" "$tmp/go.sum"

{
	echo "// Package user imports every public package of $module."
	echo "package user"
	echo
	echo "import ("
	for p in "${pkgs[@]}"; do echo "	_ \"$p\""; done
	echo ")"
} > "$tmp/user.go"
# A test that imports the test kit, as a user's tests do.
cat > "$tmp/user_test.go" <<TEST
package user

import (
	"testing"

	"$module/test"
)

func TestKit(t *testing.T) { _ = test.Options{} }
TEST

cd "$tmp"
export GOFLAGS=-mod=mod
echo ">> usercheck: ${#pkgs[@]} packages: ${pkgs[*]#"$module"/}"
$GO mod tidy
$GO build ./...
$GO vet ./...
echo ">> usercheck: go mod tidy, go build and go vet pass in a user module"
