#!/usr/bin/env bash
# Runs clang-tidy (Debian 12's clang-tidy-16, installed by scripts/setup.sh) with the repository's
# .clang-tidy on the C++ sources under src/ and tests/ that changed since a base commit, every finding an
# error; their headers under src/ are checked only where they changed too. Needs build/compile_commands.json
# (scripts/setup.sh). The base is $SY_TIDY_BASE, else the commit before HEAD (CI checks what the last
# commit changed). Exits 1 listing the findings; 0 when none (or nothing changed).
#   scripts/check_tidy.sh [FILE...]   # the given files instead of the changed ones
set -euo pipefail
cd "$(dirname "$0")/.."

tidy=clang-tidy-16
command -v $tidy >/dev/null || { echo "check_tidy: $tidy is not installed (scripts/setup.sh installs it)" >&2; exit 2; }
[ -f build/compile_commands.json ] || { echo "check_tidy: build/compile_commands.json is missing: run scripts/setup.sh first" >&2; exit 2; }

if [ $# -gt 0 ]; then
  changed=("$@")
else
  base=${SY_TIDY_BASE:-HEAD~1}
  if ! git rev-parse -q --verify "$base^{commit}" >/dev/null; then
    echo "check_tidy: no base commit $base (a shallow clone?): nothing to compare against, nothing checked"
    exit 0
  fi
  mapfile -t changed < <(git diff --name-only --diff-filter=AM "$base" HEAD -- 'src/*.cpp' 'src/*.h' 'tests/*.cpp')
fi
sources=()
headers=()
for f in "${changed[@]}"; do
  case "$f" in
    *.cpp) sources+=("$f") ;;
    *.h) headers+=("$f") ;;
  esac
done
if [ ${#sources[@]} -eq 0 ] && [ ${#headers[@]} -eq 0 ]; then
  echo "check_tidy: no C++ source changed since ${base:-the given files}"
  exit 0
fi
# A changed header is checked through the sources that include it directly (the first found).
for h in "${headers[@]}"; do
  inc=${h#src/}
  user=$(git grep -l --fixed-strings "#include \"$inc\"" -- 'src/*.cpp' | head -1 || true)
  [ -n "$user" ] && sources+=("$user")
done
mapfile -t sources < <(printf '%s\n' "${sources[@]}" | sort -u)
# Only the changed headers report findings; other headers are someone else's change.
filter='^$'
if [ ${#headers[@]} -gt 0 ]; then
  filter=$(printf '%s|' "${headers[@]}" | sed 's/|$//; s/\./\\./g')
  filter=".*($filter)\$"
fi
# Sources not in the build (another configuration's, e.g. CUDA or fuzz harnesses) are skipped.
checked=()
for f in "${sources[@]}"; do
  if grep -q "\"file\": \"$PWD/$f\"" build/compile_commands.json; then
    checked+=("$f")
  else
    echo "check_tidy: $f is not in build/compile_commands.json, skipped"
  fi
done
bad=0
if [ ${#checked[@]} -gt 0 ]; then
  logs=$(mktemp -d)
  trap 'rm -rf "$logs"' EXIT
  export tidy filter logs
  # One clang-tidy per core; each writes its findings to its own log, named after the source.
  printf '%s\n' "${checked[@]}" | xargs -P "$(nproc)" -I{} bash -c \
    '$tidy -p build --quiet --warnings-as-errors="*" --header-filter="$filter" "$1" > "$logs/$(echo "$1" | tr / _).log" 2>&1 || touch "$logs/failed"' _ {}
  if [ -e "$logs/failed" ]; then
    grep -hE "(warning|error):" "$logs"/*.log >&2 || cat "$logs"/*.log >&2
    bad=1
  fi
fi
if [ $bad -ne 0 ]; then
  echo "check_tidy: findings above ($($tidy --version | grep -m1 version)); fix them or, where the check is wrong, say why in a NOLINT comment" >&2
  exit 1
fi
echo "check_tidy: ${#checked[@]} changed sources and ${#headers[@]} changed headers are clean"
