#!/usr/bin/env bash
# Sets up, builds and runs the main job: compiles the example attention graphs
# in examples/ through the la passes, printing the IR after each stage.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LA_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" >/dev/null
for example in "${@:-$root/examples/*.mlir}"; do
  for file in $example; do
    echo "=== $(basename "$file"): input"
    cat "$file"
    echo "=== $(basename "$file"): after la-lower-to-recurrence"
    "$build/bin/la-opt" "$file" --la-lower-to-recurrence
  done
done
