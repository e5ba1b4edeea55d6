#!/usr/bin/env bash
# Packs a switchyard binary built here, with the shared libraries the GPU machine lacks, into the carry folder the
# device scripts unpack (bench/results/plan-accuracy-h200.sh and the diag*-h200.sh scripts):
# .devcarry/NAME/bin.tar.xz holding bin/switchyard (stripped) and lib/ (flat). The machine has Open MPI's own
# libmpi, the C and C++ runtimes and zlib; the rest comes from here.
#   bench/pack_device.sh [BINARY [NAME]]   # default build-cuda/switchyard (else build/switchyard), pa
# A CPU-ranks round needs a build with MPI (scripts/setup.sh -DSY_WITH_MPI=ON builds build/ so, in minutes);
# a one-GPU round needs build-cuda (scripts/build_cuda.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${1:-}
if [ -z "$bin" ]; then
  for b in build-cuda/switchyard build/switchyard; do [ -x "$b" ] && { bin=$b; break; }; done
fi
name=${2:-pa}
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "pack_device: no switchyard binary (${bin:-build-cuda/ or build/}); build one first" >&2
  exit 2
fi
ldd "$bin" | grep libmpi > /dev/null || echo "pack_device: $bin is built without MPI: layouts of several CPU ranks will fail" >&2

libs=(libopenblas.so.0 libgomp.so.1 libpcre2-8.so.0 libutf8proc.so.2 libsimdjson.so.14 libmpi_cxx.so.40 libfmt.so.9
  libgfortran.so.5 libquadmath.so.0)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" ".devcarry/$name"
strip -o "$stage/bin/switchyard" "$bin"
deps=$(ldd "$bin")
for l in "${libs[@]}"; do
  path=$(awk -v l="$l" '$1 == l { print $3 }' <<< "$deps")
  if [ -n "$path" ]; then cp -L "$path" "$stage/lib/"; fi
done
tar -C "$stage" -cf - bin lib | xz -9e -T"$(nproc)" > ".devcarry/$name/bin.tar.xz"
echo "packed $bin ($(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src || echo ', with uncommitted changes')):" \
  "$(du -h ".devcarry/$name/bin.tar.xz" | cut -f1) in .devcarry/$name/bin.tar.xz; carry [\".devcarry/$name\"]"
