#!/usr/bin/env bash
# Fails (exit 1) when a tracked C++ file is not formatted as .clang-format says, listing each.
# Run from anywhere; checks the git checkout this script lives in.
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$top"
fmt="${CLANG_FORMAT:-clang-format}"
if ! command -v "$fmt" >/dev/null; then
  echo "check_format: $fmt not found (apt-get install clang-format)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files -- '*.cc' '*.h')
bad=()
for f in "${files[@]}"; do
  if ! "$fmt" --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ "${#bad[@]}" -gt 0 ]; then
  printf 'check_format: not clang-formatted (run: clang-format -i FILE):\n' >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
