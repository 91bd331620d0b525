#!/usr/bin/env bash
# Build the kgpu image with buildah, without a Docker daemon or an image registry, for
# linux/amd64 and linux/arm64, and write each as an OCI archive (docs/install.md "Build the image").
#
#   bash deploy/container/build.sh [--arch amd64|arm64|all] [--out DIR] [--rebuild]
#
# Writes DIR/kgpu-<version>-linux-<arch>.oci.tar (default DIR: dist/) and prints, per archive,
# "<archive> <manifest digest>". An archive already built from the same inputs (the files the
# image is made of, hashed into <archive>.inputs) is kept unless --rebuild. Needs root, buildah
# and debootstrap (Debian: apt-get install buildah debootstrap), and PyPI for the wheels.
#
# The Python base: a Debian bookworm root (debootstrap --variant=minbase: python3, python3-venv,
# ca-certificates) with a virtual environment at /opt/venv on PATH, so that the Dockerfile's
# `pip install` goes into the venv (Debian's own Python refuses system-wide installs:
# EXTERNALLY-MANAGED). It is cached as a tarball in $KGPU_IMAGE_CACHE (default
# ~/.cache/kgpu-image) and given to the Dockerfile as PYTHON_IMAGE; `docker build` keeps using
# the Dockerfile's default python:3.11-slim.
#
# amd64 (the build host's architecture): `buildah bud --isolation chroot` runs the Dockerfile
# unchanged. arm64: nothing arm64 can run here without emulation, so the image is assembled
# rather than built: debootstrap --foreign downloads bookworm's arm64 packages, which are
# unpacked (dpkg-deb -x; no maintainer script needs to run for this set), pip downloads the
# aarch64 wheels (--platform manylinux2014_aarch64 --only-binary=:all:) and installs them into
# the venv's site-packages with --target, slim-site.py trims them as the Dockerfile does, and
# the image config repeats the Dockerfile's (ENV, USER, ENTRYPOINT, labels). elf-arch.py then
# checks that every ELF file in the image is aarch64.
#
# The host's CA bundle is bind-mounted into the build stage only (PyPI behind a TLS-inspecting
# proxy); it is never written into an image.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=deploy/container

archs=()
out=dist
rebuild=0
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) [ "$2" = all ] && archs+=(amd64 arm64) || archs+=("$2"); shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --rebuild) rebuild=1; shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#archs[@]} -gt 0 ] || archs=(amd64)

fail() { echo "build.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (buildah --isolation chroot, debootstrap)"
for tool in buildah debootstrap dpkg-deb; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (Debian: apt-get install buildah debootstrap)"
done

version=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
cache="${KGPU_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kgpu-image}"
mirror="${KGPU_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
suite=bookworm
# bump when the base recipe below changes: the cached tarballs are named after it
base_recipe=1
base_packages=python3,python3-venv,ca-certificates
ca_bundle="${KGPU_BUILD_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
# buildah's own store, kept apart from any other on this machine (vfs: no overlay needed)
store=(--root "${KGPU_BUILDAH_ROOT:-/var/tmp/kgpu-buildah/storage}"
       --runroot "${KGPU_BUILDAH_RUNROOT:-/var/tmp/kgpu-buildah/run}" --storage-driver vfs)
bh() { buildah "${store[@]}" "$@"; }
mkdir -p "$cache" "$out"
host_arch=$(dpkg --print-architecture)

# --- the Python base ------------------------------------------------------------------------
base_tar() { echo "$cache/base-$suite-$1-r$base_recipe.tar"; }

make_base() {
  local arch="$1" root
  root=$(mktemp -d /var/tmp/kgpu-base.XXXXXX)
  echo "== [${SECONDS}s] debootstrap $suite $arch (cached as $(base_tar "$arch"))" >&2
  if [ "$arch" = "$host_arch" ]; then
    debootstrap --variant=minbase --include="$base_packages" "$suite" "$root" "$mirror" >&2
    chroot "$root" python3 -m venv /opt/venv >&2
  else
    # first stage only: downloads and unpacks; the second stage would run arm64 binaries
    debootstrap --foreign --arch="$arch" --variant=minbase --include="$base_packages" \
      "$suite" "$root" "$mirror" >&2
    for deb in "$root"/var/cache/apt/archives/*.deb; do dpkg-deb -x "$deb" "$root"; done
    rm -rf "$root/debootstrap"
    # what the skipped maintainer scripts would have made: the CA bundle, a venv (no pip:
    # nothing runs pip in the assembled image)
    find "$root/usr/share/ca-certificates/mozilla" -name '*.crt' -print0 | sort -z \
      | xargs -0 cat > "$root/etc/ssl/certs/ca-certificates.crt"
    local py
    py=$(basename "$(readlink "$root/usr/bin/python3")")
    mkdir -p "$root/opt/venv/bin" "$root/opt/venv/lib/$py/site-packages"
    ln -s /usr/bin/python3 "$root/opt/venv/bin/python3"
    ln -s python3 "$root/opt/venv/bin/python"
    ln -s lib "$root/opt/venv/lib64"
    printf 'home = /usr/bin\ninclude-system-site-packages = false\nversion = %s\n' \
      "${py#python}" > "$root/opt/venv/pyvenv.cfg"
  fi
  # what no container needs: package caches and lists, documentation, translations
  rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* \
    "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
  tar --numeric-owner -C "$root" -cf "$(base_tar "$arch").part" .
  mv "$(base_tar "$arch").part" "$(base_tar "$arch")"
  rm -rf "$root"
}

# the base as an image in buildah's store, named localhost/kgpu-python-base:<suite>-<arch>
import_base() {
  local arch="$1" image="localhost/kgpu-python-base:$suite-$1-r$base_recipe" ctr
  if ! bh inspect --type image "$image" >/dev/null 2>&1; then
    [ -f "$(base_tar "$arch")" ] || make_base "$arch"
    ctr=$(bh from --arch "$arch" scratch)
    bh add "$ctr" "$(base_tar "$arch")" / >/dev/null
    bh config --arch "$arch" --os linux \
      --env PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --env VIRTUAL_ENV=/opt/venv --env LANG=C.UTF-8 "$ctr"
    bh commit --quiet --rm "$ctr" "$image" >/dev/null
  fi
  echo "$image"
}

# --- the images -----------------------------------------------------------------------------
build_native() {
  local arch="$1" base="$2"
  echo "== [${SECONDS}s] buildah bud ($arch) from $base" >&2
  bh bud --isolation chroot --layers=false --arch "$arch" \
    -f "$here/Dockerfile" --build-arg PYTHON_IMAGE="$base" \
    --volume "$ca_bundle:/etc/ssl/certs/ca-certificates.crt:ro" \
    -t "localhost/kgpu:$version-$arch" . >&2
}

build_assembled() {
  local arch="$1" base="$2" tmp site wheels="$cache/wheels-$1" ctr
  local platform
  case "$arch" in
    arm64) platform=manylinux2014_aarch64 ;;
    *) fail "no wheel platform known for $arch" ;;
  esac
  echo "== [${SECONDS}s] assembling $arch from $base and $platform wheels" >&2
  tmp=$(mktemp -d /var/tmp/kgpu-assemble.XXXXXX)
  mkdir -p "$wheels"
  python3 -m pip wheel -q --no-deps --wheel-dir "$tmp/own" . >&2
  python3 -m pip download -q --dest "$wheels" --find-links "$tmp/own" \
    --platform "$platform" --python-version 3.11 --implementation cp --only-binary=:all: \
    "kgpu[cluster]" >&2
  site="$tmp/site"
  python3 -m pip install -q --no-index --find-links "$wheels" --find-links "$tmp/own" \
    --platform "$platform" --python-version 3.11 --implementation cp --only-binary=:all: \
    --no-compile --no-warn-conflicts --target "$site" "kgpu[cluster]" >&2
  rm -rf "$site/bin"  # console scripts written for the host's interpreter
  python3 "$here/slim-site.py" "$site" >&2
  ctr=$(bh from --quiet --arch "$arch" "$base")
  bh copy "$ctr" "$site" /opt/venv/lib/python3.11/site-packages >/dev/null
  printf '#!/opt/venv/bin/python\nimport sys\nfrom kgpu.cli import main\nsys.exit(main())\n' \
    > "$tmp/kgpu"
  bh copy --chmod 0755 "$ctr" "$tmp/kgpu" /opt/venv/bin/kgpu >/dev/null
  bh copy --chmod 0755 "$ctr" "$here/kgpu-link-driver.sh" /usr/local/bin/kgpu-link-driver >/dev/null
  # the Dockerfile's final stage, repeated (tests/deploy/test_image.py compares them)
  local cfg=()
  while IFS= read -r line; do cfg+=("$line"); done < <(
    python3 "$here/dockerfile-config.py" "$here/Dockerfile" "$(bh inspect --format '{{range .OCIv1.Config.Env}}{{println .}}{{end}}' "$base" | sed -n 's/^PATH=//p')")
  bh config "${cfg[@]}" "$ctr"
  bh commit --quiet --rm "$ctr" "localhost/kgpu:$version-$arch" >/dev/null
  rm -rf "$tmp"
}

check_elf() {
  local arch="$1" ctr mnt
  ctr=$(bh from --quiet "localhost/kgpu:$version-$arch")
  mnt=$(bh mount "$ctr")
  python3 "$here/elf-arch.py" --arch "$arch" "$mnt" >&2 || { bh rm "$ctr" >/dev/null; fail "$arch image holds ELF files of another architecture"; }
  bh rm "$ctr" >/dev/null
}

# what the image is made of: the Dockerfile's build context, this script and its helpers
inputs_hash() {
  { echo "$1 $suite r$base_recipe"
    find pyproject.toml README.md src "$here" -type f ! -name '*.pyc' ! -path '*/__pycache__/*' \
      ! -path '*.egg-info/*' -print0 | sort -z | xargs -0 sha256sum
  } | sha256sum | cut -d' ' -f1
}

for arch in "${archs[@]}"; do
  archive="$out/kgpu-$version-linux-$arch.oci.tar"
  hash=$(inputs_hash "$arch")
  if [ "$rebuild" = 0 ] && [ -f "$archive" ] && [ "$(sed -n 1p "$archive.inputs" 2>/dev/null)" = "$hash" ]; then
    echo "== [${SECONDS}s] $archive is built from these inputs already (--rebuild to build it again)" >&2
    echo "$archive $(sed -n 2p "$archive.inputs")"
    continue
  fi
  base=$(import_base "$arch")
  if [ "$arch" = "$host_arch" ]; then
    build_native "$arch" "$base"
  else
    build_assembled "$arch" "$base"
  fi
  check_elf "$arch"
  echo "== [${SECONDS}s] writing $archive" >&2
  rm -f "$archive" "$archive.inputs"
  bh push --quiet --digestfile "$out/.digest-$arch" "localhost/kgpu:$version-$arch" \
    "oci-archive:$archive:kgpu:$version" >&2
  printf '%s\n%s\n' "$hash" "$(cat "$out/.digest-$arch")" > "$archive.inputs"
  echo "$archive $(cat "$out/.digest-$arch")"
  rm -f "$out/.digest-$arch"
  bh rmi --prune >/dev/null 2>&1 || true  # the image this one replaced (vfs: a full copy each)
done
