# The course image: the labs, their tests and the grader, installed with the exact versions that
# pyproject.toml pins (the single source of truth; no version is repeated here). The grader is the
# entry point, running as an unprivileged user.
#
# Build (online: packages come from the package index):
#   docker build -t torch-compile-labs .
# Build offline from a wheelhouse inside the build context (docker/build-wheelhouse.sh makes one; its
# wheels must match the base image's Python: WHEELHOUSE_PYTHON_VERSION=3.12 for the default base):
#   docker build --build-arg WHEELHOUSE=build/wheelhouse -t torch-compile-labs .
# Build with no registry at all (base image from debootstrap: docker/build-base-image.sh):
#   docker build --build-arg BASE_IMAGE=localhost/course-base:bookworm \
#                --build-arg WHEELHOUSE=build/wheelhouse -t torch-compile-labs .
#
# Grade one submission (network off; the submission read-only):
#   docker run --rm --gpus all --network none -v "$PWD/SUB":/submission:ro -v "$PWD/OUT":/out \
#       torch-compile-labs run /submission --out /out
#
# Targets: the default (`grader`) holds the course, its held-out tests and the grader, never the
# reference solutions; `--target instructor` adds them, for running the course's own tests in the image
# (nox -s image-cpu / image-gpu). Neither is for students: held-out tests are in both.
# `--target student` is the students' image: exactly the student release (no solutions, no held-out
# tests, no instructor sections) with the course environment installed; .devcontainer/devcontainer.json
# builds it (on Debian, BASE_IMAGE=debian:bookworm-slim) for VS Code and Codespaces.

# A CUDA runtime base. PyTorch's wheels bring their own CUDA libraries; the host needs only an NVIDIA
# driver recent enough for them (and the NVIDIA container toolkit for --gpus).
ARG BASE_IMAGE=nvidia/cuda:13.0.2-runtime-ubuntu24.04

# ---- system: Python, its headers and a C++ compiler (installed only if the base lacks them) -------
FROM ${BASE_IMAGE} AS system
COPY docker/install-system-packages.sh /usr/local/sbin/install-system-packages.sh
RUN sh /usr/local/sbin/install-system-packages.sh

# ---- requirements: the list to install, read from pyproject.toml ------------------------------------
FROM system AS requirements
COPY pyproject.toml docker/pyproject_requirements.py /opt/requirements/
RUN python3 /opt/requirements/pyproject_requirements.py /opt/requirements/pyproject.toml \
        > /opt/requirements/requirements.txt

# ---- deps: a virtual environment with every requirement, from the index or from the wheelhouse ----
# Its own stage, keyed on the requirement list and the wheelhouse only: editing the course (or another
# part of pyproject.toml) does not reinstall PyTorch, and the wheelhouse (several GB) never reaches
# the final image.
FROM system AS deps
# WHEELHOUSE: a folder of wheels, relative to the build context; empty = use the package index.
ARG WHEELHOUSE=
COPY --from=requirements /opt/requirements/requirements.txt /opt/requirements/requirements.txt
# Without a wheelhouse, docker/ stands in for it: COPY needs a source, and pip ignores its files.
COPY ${WHEELHOUSE:-docker} /opt/wheelhouse/
RUN set -eu; \
    if [ -n "$WHEELHOUSE" ]; then \
        echo "installing offline from the wheelhouse $WHEELHOUSE"; \
        export PIP_NO_INDEX=1 PIP_FIND_LINKS=/opt/wheelhouse; \
    fi; \
    python3 -m venv /opt/venv; \
    /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check \
        --requirement /opt/requirements/requirements.txt

# ---- source: the course's files (the build context without the wheelhouse) --------------------------
# The reference solutions are set aside: the grading image (the default target) never holds them, so
# no graded process and no one who pulls the image can read them. Only the `instructor` target (the
# course's own test suite runs in it) copies them back.
FROM system AS source
ARG WHEELHOUSE=
COPY . /opt/course
RUN if [ -n "$WHEELHOUSE" ]; then rm -rf "/opt/course/$WHEELHOUSE"; fi; rm -rf /opt/course/build \
    && mkdir /opt/instructor && mv /opt/course/solutions /opt/instructor/solutions

# ---- the grading image's contents ------------------------------------------------------------------------
FROM system AS course
# The course and the environment belong to root and are read-only for the user who grades: a
# submission cannot change the pristine tests or the grader it is graded by.
COPY --from=deps /opt/venv /opt/venv
COPY --from=source /opt/course /opt/course
# Every requirement is already in the environment, so installing the course itself needs no index.
RUN /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check --no-index \
        --no-deps --no-build-isolation --editable /opt/course \
    && /opt/venv/bin/pip check \
    && /opt/venv/bin/python -m grader.pin \
    && useradd --create-home --uid 10001 --user-group course \
    && chmod 1777 /home/course \
    && mkdir -p /submission /out \
    && chown course:course /out
# Any uid may run the image (docker run --user "$(id -u):$(id -g)" keeps output files yours): HOME is
# writable by all, for the compilers' caches (TorchInductor, Triton, matplotlib). Running the course's
# tests in the read-only /opt/course writes no cache there (pytest's and hypothesis's go elsewhere), and
# the nox sessions use the installed environment (COURSE_PYTHON) instead of creating their own.
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/home/course \
    COURSE_PYTHON=/opt/venv/bin/python \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTEST_ADDOPTS="-p no:cacheprovider" \
    HYPOTHESIS_STORAGE_DIRECTORY=/tmp/hypothesis \
    COURSE_GRADER_CACHE=/opt/course-grader-cache \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
WORKDIR /opt/course
USER course
# Collect the pristine rubric now, into a cache that is part of the image (read-only when graded):
# every grading container then starts on the tests at once. The grader checks every entry it reads.
USER root
RUN mkdir -p "$COURSE_GRADER_CACHE" && python -m grader.warm && chmod -R a+rX "$COURSE_GRADER_CACHE"
USER course
ENTRYPOINT ["python", "-m", "grader"]
CMD ["--help"]

# ---- instructor: the grading image plus the reference solutions (nox -s image-cpu runs the course's
# own test suite in it). Never hand this one to students.
FROM course AS instructor
COPY --from=source --chown=root:root /opt/instructor/solutions /opt/course/solutions

# ---- student-release: the student distribution, made by the grader's own release function -------------
# `python -m grader release` leaves out what students must not have (every lab's heldout/, the project's
# own tests, the grader's instructor tools, the instructor sections of every Markdown file), so the
# student image holds exactly what a student's copy of the course holds. Only the release's inputs are
# copied in (its packages and root files; a test checks the list against the release): solutions/ never
# enters any stage the student image is built from, nor a wheelhouse. The same lines build from a
# student's copy of the release too, which the release leaves as it is.
FROM deps AS student-release
COPY conftest.py pyproject.toml noxfile.py README.md .gitignore Dockerfile .dockerignore /opt/context/
COPY .devcontainer /opt/context/.devcontainer
COPY docker /opt/context/docker
COPY labkit /opt/context/labkit
COPY grader /opt/context/grader
COPY lab01_fx_passes /opt/context/lab01_fx_passes
COPY lab02_npu_backend /opt/context/lab02_npu_backend
COPY lab03_triton_lowering /opt/context/lab03_triton_lowering
RUN cd /opt/context \
    && PYTHONDONTWRITEBYTECODE=1 /opt/venv/bin/python -m grader release --course /opt/context --out /opt/student \
        --no-verify

# ---- student: the course environment for a student's laptop (VS Code's Dev Containers, Codespaces) ------
# The student's own checkout is the workspace (mounted at /workspaces/<name>); the copy of the course
# here is the pristine one the environment is installed from, read-only, and `nox -s grade-me` grades
# the checkout against it as the course's grader would. A shell, not the grader, is what it starts.
FROM system AS student
# git, for committing from inside the container (Codespaces' terminal, VS Code's Source Control): from
# the distribution's package index when the base lacks it; an offline build goes on without it, saying so.
RUN if command -v git >/dev/null 2>&1; then echo "git: present"; \
    elif command -v apt-get >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get update \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends git; then \
        rm -rf /var/lib/apt/lists/*; \
    else echo "warning: git could not be installed (no package index): commit from outside the container"; fi \
    && useradd --create-home --uid 10001 --user-group --shell /bin/bash course \
    && chmod 1777 /home/course
COPY --from=deps /opt/venv /opt/venv
COPY --from=student-release /opt/student /opt/course
RUN /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check --no-index \
        --no-deps --no-build-isolation --editable /opt/course \
    && /opt/venv/bin/pip check \
    && /opt/venv/bin/python -m grader.pin
# nox uses the installed environment (COURSE_PYTHON) instead of creating .nox/course-env; HOME is writable
# by any uid (the Dev Containers tools may give `course` the host user's uid), for the compilers' caches.
# A GPU passed in (--gpus all, with the NVIDIA container toolkit) needs nothing more: PyTorch's wheels bring CUDA.
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/home/course \
    COURSE_PYTHON=/opt/venv/bin/python \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
WORKDIR /opt/course
USER course
CMD ["bash"]

# ---- the grading image (the default target): the course, its held-out tests and the grader; no solutions
FROM course AS grader
