#!/usr/bin/env bash
# Runs the libFuzzer target la-fuzz for a given time (default 300 s):
#   scripts/fuzz.sh [seconds] [extra libFuzzer flags...]
# Seeds: every split (// -----) of every .mlir file under test/, plus the
# regression corpus test/Fuzz/corpus. New crashes land in build-asan/fuzz/
# as crash-*; minimise them, fix the bug, and keep the input in
# test/Fuzz/corpus (and as a lit test) so it stays fixed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LA_ASAN_BUILD_DIR:-$root/build-asan}
seconds=${1:-300}
shift || true
if [ ! -x "$build/bin/la-fuzz" ]; then
  echo "fuzz.sh: $build/bin/la-fuzz is missing; run scripts/sanitize.sh first" >&2
  exit 1
fi
work="$build/fuzz"
mkdir -p "$work/corpus" "$work/seeds"
"${PYTHON:-python3}" - "$root/test" "$work/seeds" <<'PY'
import pathlib, sys
root, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
count = 0
for path in sorted(root.rglob("*.mlir")):
    for index, part in enumerate(path.read_text().split("// -----")):
        lines = [l for l in part.splitlines() if not l.lstrip().startswith("// RUN")]
        (out / f"{path.stem}-{index}.mlir").write_text("\n".join(lines) + "\n")
        count += 1
print(f"fuzz.sh: {count} seed inputs from {root}")
PY
# See sanitize.sh for allow_user_poisoning=0.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allow_user_poisoning=0}
cd "$work"
"$build/bin/la-fuzz" "$work/corpus" "$work/seeds" "$root/test/Fuzz/corpus" \
  -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 \
  -print_final_stats=1 "$@"
