#!/usr/bin/env bash
# The main job: sets up, builds, then compiles and runs one linear-attention
# layer per variant on the CPU with la-run, printing per variant the error
# against the fp64 reference and the run and compile times; then shows how to
# print the IR after every pass. Extra arguments go to run-example.py.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh" >/dev/null
exec "${PYTHON:-python3}" "$root/scripts/run-example.py" "$@"
