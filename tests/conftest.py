"""Shared fixtures.

GPU tests use the process-wide runtime. Off CI, a machine without any wgpu
adapter skips them; on CI (``CI=true``) a missing adapter is an error, like
wgpu-py's own CI flag, so a broken driver fails the run instead of skipping.
"""

from __future__ import annotations

import os

import pytest

ON_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def runtime():
    from ssmviz.core.errors import SsmvizError
    from ssmviz.core.gpu import get_runtime

    try:
        return get_runtime()
    except SsmvizError as exc:
        if ON_CI:
            pytest.fail(f"CI needs a wgpu adapter (lavapipe): {exc}")
        pytest.skip(f"no wgpu adapter: {exc}")


@pytest.fixture
def tint_ready() -> None:
    """For tests of Tint's own findings: on CI Tint must run (the bootstrap installs it);
    elsewhere, without Node.js or the npm package, they skip and say why."""
    from ssmviz.core.external.tint import unavailable_reason

    reason = unavailable_reason()
    if reason is None:
        return
    if ON_CI:
        pytest.fail(f"CI must run the Tint cross-check: {reason}")
    pytest.skip(f"Tint cross-check unavailable: {reason}")
