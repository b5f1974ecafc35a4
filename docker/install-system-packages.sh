#!/bin/sh
# Install what the course image needs from the operating system, and only what is missing:
#   - Python 3.10+ with its venv module (the course lives in a virtual environment),
#   - Python's C headers and a C++ compiler (TorchInductor compiles C++ kernels on CPU; Triton builds
#     its GPU launcher with a C compiler at run time),
#   - CA certificates (for a build that installs from a package index),
#   - bubblewrap (bwrap), which isolates every graded process (grader.execute.isolation).
# A base image that already has all of them (such as the one docker/build-base-image.sh makes) needs
# no package manager and no network here, which is what makes a fully offline build possible.
set -eu

has_python() {
    command -v python3 >/dev/null 2>&1 || return 1
    python3 - <<'PY' 2>/dev/null
import os, sys, sysconfig
import ensurepip, venv  # noqa: F401  (python3-venv)
assert sys.version_info >= (3, 10), sys.version
assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))  # python3-dev
PY
}

if has_python && command -v g++ >/dev/null 2>&1 && command -v bwrap >/dev/null 2>&1 && [ -d /etc/ssl/certs ]; then
    echo "system packages: python3 $(python3 -c 'import platform; print(platform.python_version())'), venv, headers, g++ and bwrap already present"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: the base image lacks python3 (3.10+, venv, headers), g++ or bwrap, and has no apt-get to install them" >&2
    exit 1
fi
echo "system packages: installing python3, python3-venv, python3-dev, g++, bubblewrap and ca-certificates with apt-get"
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv python3-dev g++ bubblewrap ca-certificates
rm -rf /var/lib/apt/lists/*
