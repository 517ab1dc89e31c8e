"""The builderforce-memory-engine npm package: the real kernels ssmviz is asked to judge.

The package is pinned (exact version, ``package-lock.json``, lockfileVersion 3) beside
Tint's ``webgpu`` in ``tint_node/``; the bootstrap's ``npm ci`` there installs both. Its
WGSL ships as template literals in ``dist/kernels/*.js`` (``selective_scan.js`` for S6,
``ssd.js`` for SSD, ``complex_ssd.js`` for Mamba-3, and the block's other kernels), wired
into blocks by ``dist/model/mamba*_block.js``. The built-in profiles ``builderforce-s6``
and ``builderforce-ssd`` describe how those blocks bind and dispatch the scan kernels;
``builderforce-complex-ssd`` (Mamba-3's) follows complex_ssd.js's own header.
"""

from __future__ import annotations

import json
from pathlib import Path

from ssmviz.core.external.tint import NODE_DIR, SETUP_HINT

PACKAGE = "@seanhogg/builderforce-memory-engine"


def pinned_version() -> str:
    """The exact version ``tint_node/package.json`` pins."""
    deps = json.loads((NODE_DIR / "package.json").read_text())["dependencies"]
    return str(deps[PACKAGE])


def _installed_dir() -> Path:
    return NODE_DIR / "node_modules" / Path(*PACKAGE.split("/"))


def unavailable_reason() -> str | None:
    """Why the pinned package is not here, in a few words; None when it is."""
    meta = _installed_dir() / "package.json"
    if not meta.is_file():
        return f"the npm package {PACKAGE} is not installed; {SETUP_HINT}"
    try:
        have = json.loads(meta.read_text()).get("version")
    except (OSError, ValueError) as exc:
        return f"{meta} is unreadable ({exc}); {SETUP_HINT}"
    want = pinned_version()
    if have != want:
        return f"{PACKAGE} {have} is installed but {want} is pinned; {SETUP_HINT}"
    return None


def builderforce_package_dir() -> Path | None:
    """The installed package's folder (holding ``dist/kernels`` and ``dist/model``), at
    the pinned version; None when it is missing or another version (see
    :func:`unavailable_reason`)."""
    return _installed_dir() if unavailable_reason() is None else None
