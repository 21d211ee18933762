#!/usr/bin/env bash
# Sets up, builds and runs every test: the lit suite (check-la) and the
# Python tests (the fp64 reference and, later, the package).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LA_BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
cmake --build "$build" --target check-la
"${PYTHON:-python3}" -m pytest -q "$root/python/tests"
