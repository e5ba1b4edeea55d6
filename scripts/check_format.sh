#!/usr/bin/env bash
# Checks every tracked C++ and CUDA source against the repository's .clang-format (Debian 12's
# clang-format 14, installed by scripts/setup.sh); lists the files that differ and exits 1 if any does.
# `scripts/check_format.sh --fix` rewrites them in place instead.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v clang-format >/dev/null || { echo "check_format: clang-format is not installed (scripts/setup.sh installs it)" >&2; exit 2; }
mapfile -t files < <(git ls-files 'src/*.cpp' 'src/*.h' 'src/*.cu' 'src/*.cuh' 'tests/*.cpp' 'tests/*.h' 'tools/*.cpp')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check_format: ${#bad[@]} of ${#files[@]} files differ from .clang-format ($(clang-format --version | head -1)):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "run scripts/check_format.sh --fix (or clang-format -i FILE) and commit the result" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files follow .clang-format"
