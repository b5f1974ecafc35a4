#!/usr/bin/env bash
# Build a minimal Debian base image without any image registry, for air-gapped machines and for
# testing the Dockerfile where no registry is reachable.
#
#   docker/build-base-image.sh [IMAGE_NAME]        (default: localhost/course-base:bookworm)
#   REBUILD_BASE_IMAGE=1 docker/build-base-image.sh  (import again even if the image exists)
#
# debootstrap fetches Debian packages from a Debian mirror (or a local mirror given in
# DEBIAN_MIRROR), builds a root filesystem with Python 3.11, its venv module and headers, a C++
# compiler (TorchInductor compiles C++ on CPU and Triton builds its launcher with a C compiler) and
# bubblewrap (the grader isolates every graded process with it), then imports it into the container engine as an image. The Dockerfile's system-dependency step finds
# everything already installed in such a base, so the course image then builds with no network at all.
# Needs root, debootstrap, and podman or docker.
set -euo pipefail

IMAGE="${1:-localhost/course-base:bookworm}"
SUITE="${DEBIAN_SUITE:-bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
HERE="$(cd "$(dirname "$0")" && pwd)"
WORK="${BASE_IMAGE_WORKDIR:-$HERE/../build/container}"
ENGINE="${CONTAINER_ENGINE:-$(command -v podman || command -v docker || true)}"
PACKAGES="python3,python3-venv,python3-dev,g++,bubblewrap,ca-certificates"

if [[ -z "${ENGINE// }" ]]; then
    echo "error: neither podman nor docker is installed" >&2
    exit 2
fi
if ! command -v debootstrap >/dev/null; then
    echo "error: debootstrap is not installed (apt-get install -y debootstrap)" >&2
    exit 2
fi

ROOTFS="$WORK/rootfs-$SUITE"
# Importing makes a new image id, which would invalidate every cached layer built on it: keep the
# image there is unless REBUILD_BASE_IMAGE=1.
if [[ "${REBUILD_BASE_IMAGE:-0}" != 1 ]] && $ENGINE image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "base image $IMAGE exists (REBUILD_BASE_IMAGE=1 rebuilds it)"
    exit 0
fi
mkdir -p "$WORK"
if [[ ! -f "$ROOTFS/.complete" ]]; then
    rm -rf "$ROOTFS"
    echo "debootstrap: $SUITE from $MIRROR into $ROOTFS (a few minutes)"
    debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" "$MIRROR"
    # Keep the image small: package lists and caches are rebuilt by apt-get update if ever needed.
    rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/archives/*.deb
    touch "$ROOTFS/.complete"
fi

echo "importing $ROOTFS as $IMAGE with $ENGINE"
# $ENGINE unquoted: it may carry global options ("podman --runtime runc").
tar --numeric-owner --exclude=./.complete -C "$ROOTFS" -c . \
    | $ENGINE import --change 'CMD ["/bin/bash"]' - "$IMAGE"
echo "base image ready: $IMAGE"
