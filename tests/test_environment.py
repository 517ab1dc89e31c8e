"""The machine the tests run on: Qt-free core, the adapter, the packaged data."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ON_CI

ROOT = Path(__file__).resolve().parent.parent


def test_core_imports_no_qt() -> None:
    # A fresh interpreter: importing ssmviz.core and every module under it loads no Qt.
    code = (
        "import importlib, pkgutil, sys\n"
        "import ssmviz.core as core\n"
        "for m in pkgutil.walk_packages(core.__path__, 'ssmviz.core.'):\n"
        "    importlib.import_module(m.name)\n"
        "bad = sorted(k for k in sys.modules if k.split('.')[0] in "
        "('PySide6', 'shiboken6', 'pyqtgraph', 'PyQt5', 'PyQt6'))\n"
        "n = sum(1 for k in sys.modules if k.startswith('ssmviz.core.'))\n"
        "print(n, bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    count = int(out.stdout.split()[0])
    assert count >= 8, f"only {count} core modules were imported"


@pytest.mark.skipif(not ON_CI, reason="the lavapipe assertion is for CI (CI=true)")
def test_ci_adapter_is_lavapipe(runtime) -> None:
    assert runtime.is_lavapipe(), f"CI expects lavapipe, got {runtime.description()}"


def test_adapter_is_described(runtime) -> None:
    text = runtime.description()
    assert "/" in text and runtime.limits["max-storage-buffers-per-shader-stage"] >= 8


def test_wheel_ships_shaders_and_assets(tmp_path: Path) -> None:
    # A plain (non-editable) wheel must carry shaders/ and assets/ inside the package.
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    wheel = next(tmp_path.glob("ssmviz-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    shaders = sorted(p.name for p in (ROOT / "shaders").glob("*.wgsl"))
    assert shaders, "no shaders in the source tree"
    for name in shaders:
        assert f"ssmviz/shaders/{name}" in names
    assert any(n.startswith("ssmviz/assets/") for n in names)
    # The Tint front end's script and lock ship; its node_modules (npm ci) do not.
    for name in ("tint.mjs", "package.json", "package-lock.json"):
        assert f"ssmviz/core/external/tint_node/{name}" in names
    assert not any("node_modules" in n for n in names)
    # Installed from the wheel (not the source tree), the resources are found.
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    code = (
        "import ssmviz.core.resources as r; "
        "print(r.shader_path('" + shaders[0] + "')); print(r.assets_dir())"
    )
    probe = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert probe.returncode == 0, probe.stderr
    assert str(target) in probe.stdout
