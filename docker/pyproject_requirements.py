"""Print the requirements an offline install of the course needs, read from ``pyproject.toml``.

    python docker/pyproject_requirements.py pyproject.toml > requirements.txt

One requirement per line: the build backend (``[build-system] requires``, needed to install the
course itself with ``--no-index``), ``[project] dependencies``, and every optional extra. Versions are
never written anywhere else: the wheelhouse and the image follow ``pyproject.toml``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import tomllib


def offline_requirements(pyproject: Path) -> list[str]:
    """Return the build, runtime and extra requirements of ``pyproject``, without duplicates."""
    data = tomllib.loads(pyproject.read_text())
    project = data.get("project", {})
    requirements = [
        *data.get("build-system", {}).get("requires", []),
        *project.get("dependencies", []),
        *(req for extra in project.get("optional-dependencies", {}).values() for req in extra),
    ]
    return list(dict.fromkeys(requirements))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: pyproject_requirements.py PATH/TO/pyproject.toml")
    print("\n".join(offline_requirements(Path(sys.argv[1]))))
