#!/usr/bin/env bash
# Download every wheel the course image needs into one folder (a "wheelhouse"), so that the image
# can be built on a machine with no package index at all (air-gapped clusters, or a container build
# that cannot reach one).
#
#   docker/build-wheelhouse.sh [DEST]      (default: build/wheelhouse)
#
# The requirements are read from pyproject.toml (dependencies, the dev extra, and the build backend):
# versions live there and nowhere else. Wheels are chosen for the Python running this script; set
# WHEELHOUSE_PYTHON_VERSION (e.g. 3.12) to build for a base image with another Python (an x86-64 Linux
# with glibc 2.28 or newer is assumed). The folder is several GB (PyTorch and its CUDA libraries).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
DEST="${1:-$ROOT/build/wheelhouse}"
PYTHON="${PYTHON:-python3}"
TARGET=()
if [[ -n "${WHEELHOUSE_PYTHON_VERSION:-}" ]]; then
    # Wheels for another interpreter: name it, and every manylinux tag a glibc 2.28 system accepts.
    TARGET=(--python-version "$WHEELHOUSE_PYTHON_VERSION" --implementation cp)
    for tag in manylinux2014_x86_64 manylinux_2_17_x86_64 manylinux_2_24_x86_64 manylinux_2_27_x86_64 manylinux_2_28_x86_64; do
        TARGET+=(--platform "$tag")
    done
fi

mkdir -p "$DEST"
REQUIREMENTS="$DEST/requirements.txt"
"$PYTHON" "$HERE/pyproject_requirements.py" "$ROOT/pyproject.toml" > "$REQUIREMENTS"
echo "wheelhouse for Python ${WHEELHOUSE_PYTHON_VERSION:-$("$PYTHON" -V)} in $DEST; requirements:"
sed 's/^/  /' "$REQUIREMENTS"

# --only-binary: the image installs with --no-index and must never need to compile a package.
"$PYTHON" -m pip download --disable-pip-version-check --dest "$DEST" --only-binary=:all: \
    "${TARGET[@]}" -r "$REQUIREMENTS"
echo "wheelhouse ready: $(find "$DEST" -name '*.whl' | wc -l) wheels, $(du -sh "$DEST" | cut -f1)"
