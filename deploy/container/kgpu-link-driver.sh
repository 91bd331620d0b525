#!/bin/sh
# kgpu-link-driver [--wait SECONDS]: make the host driver's NVML/CUDA libraries and MPS binaries
# usable inside the kgpu image without putting the host's whole library directory on the
# loader path (that would load the host's libc, libssl... into the container's Python).
#
# Looks for libnvidia-ml.so.1 under the driver root mounted at $KGPU_DRIVER_ROOT (default
# /driver-root: the host's "/" or the GPU Operator's /run/nvidia/driver) and links
#   <lib dir>/libnvidia-*.so*, libcuda.so*  ->  $KGPU_DRIVER_LINKS/lib   (image: LD_LIBRARY_PATH)
#   nvidia-cuda-mps-control, -server, nvidia-smi  ->  $KGPU_DRIVER_LINKS/bin   (image: PATH)
# Links are absolute paths inside the container; a host symlink with an absolute target is
# followed under the driver root. With --wait it retries every 5 s until the driver appears
# (a driver container may still be installing it); then exits 1 naming where it looked.
set -eu

root="${KGPU_DRIVER_ROOT:-/driver-root}"
links="${KGPU_DRIVER_LINKS:-/run/kgpu/driver}"
wait_s=0
if [ "${1:-}" = "--wait" ]; then
  wait_s="${2:?--wait needs a number of seconds}"
fi

LIB_DIRS="usr/lib64 usr/lib/x86_64-linux-gnu usr/lib/aarch64-linux-gnu lib64 lib/x86_64-linux-gnu lib/aarch64-linux-gnu usr/lib lib"
BIN_DIRS="usr/bin bin usr/sbin sbin"
BINARIES="nvidia-cuda-mps-control nvidia-cuda-mps-server nvidia-smi"

# the path of $1 inside the container once every symlink hop is taken under the driver root
resolve() {
  path="$1"
  hops=0
  while [ -L "$path" ] && [ "$hops" -lt 16 ]; do
    target=$(readlink "$path")
    case "$target" in
      /*) path="$root$target" ;;
      *) path="$(dirname "$path")/$target" ;;
    esac
    hops=$((hops + 1))
  done
  printf '%s\n' "$path"
}

find_lib_dir() {
  for d in $LIB_DIRS; do
    if [ -e "$(resolve "$root/$d/libnvidia-ml.so.1")" ]; then
      printf '%s\n' "$root/$d"
      return 0
    fi
  done
  return 1
}

waited=0
until lib_dir=$(find_lib_dir); do
  if [ "$waited" -ge "$wait_s" ]; then
    echo "kgpu-link-driver: no libnvidia-ml.so.1 under $root (looked in: $LIB_DIRS);" \
      "is the NVIDIA driver installed, and is the chart's nvidiaDriverRoot its root?" >&2
    exit 1
  fi
  echo "kgpu-link-driver: waiting for the NVIDIA driver under $root ($waited s)" >&2
  sleep 5
  waited=$((waited + 5))
done

mkdir -p "$links/lib" "$links/bin"
count=0
for f in "$lib_dir"/libnvidia-*.so* "$lib_dir"/libcuda.so*; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  ln -sfn "$(resolve "$f")" "$links/lib/$(basename "$f")"
  count=$((count + 1))
done
for b in $BINARIES; do
  for d in $BIN_DIRS; do
    if [ -e "$(resolve "$root/$d/$b")" ]; then
      ln -sfn "$(resolve "$root/$d/$b")" "$links/bin/$b"
      break
    fi
  done
done
echo "kgpu-link-driver: linked $count driver libraries from $lib_dir into $links/lib"
