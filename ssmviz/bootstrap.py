"""Set up a fresh Debian/Ubuntu machine for ssmviz, then launch the app or run the tests.

Standard library only: it runs before any dependency is installed.

    python3 -m ssmviz.bootstrap app [ssmviz arguments...]   # set up, then launch the app
    python3 -m ssmviz.bootstrap test [pytest arguments...]  # set up, then ruff, lint-imports, tests

It installs the system packages that are missing (Mesa's lavapipe Vulkan driver
when no Vulkan driver is present, the libraries Qt needs, Xvfb for the window
tests), creates ``.venv`` in the project root, installs ssmviz into it
(editable, with the ``test`` extra for ``test``) and reinstalls only when
``pyproject.toml`` changes. For the Tint cross-check (Chrome's WGSL compiler beside
naga) it installs Debian's ``nodejs`` and ``npm`` when missing and runs ``npm ci`` in
``ssmviz/core/external/tint_node`` when ``node_modules`` is missing or
``package-lock.json`` changed; the same lock pins the builderforce-memory-engine
package, whose kernels the tests judge. Where Node cannot be had it says so and goes on
(every kernel report then says "Tint cross-check unavailable", and the tests of the
package's kernels skip saying why).
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
TINT_DIR = ROOT / "ssmviz" / "core" / "external" / "tint_node"

#: Vulkan driver manifests live in one of these folders (the loader's search path).
_ICD_DIRS = (
    "/usr/share/vulkan/icd.d",
    "/etc/vulkan/icd.d",
    "/usr/local/share/vulkan/icd.d",
)
#: Shared libraries PySide6 needs at run time, offscreen and under X11/Xvfb.
_QT_PACKAGES = (
    "libegl1",
    "libgl1",
    "libopengl0",
    "libxkbcommon0",
    "libxkbcommon-x11-0",
    "libfontconfig1",
    "libglib2.0-0",
    "libdbus-1-3",
    "libxcb-cursor0",
    "libxcb-icccm4",
    "libxcb-keysyms1",
    "libxcb-shape0",
    "libxcb-xinerama0",
    "libxcb-randr0",
    "libxcb-render-util0",
    "libxcb-image0",
    "libxcb-xkb1",
    "fonts-dejavu-core",
)
_TEST_PACKAGES = ("xvfb", "xauth")


def _say(message: str) -> None:
    print(f"[ssmviz setup] {message}", flush=True)


def _has_vulkan_driver() -> bool:
    if os.environ.get("VK_ICD_FILENAMES") or os.environ.get("VK_DRIVER_FILES"):
        return True
    return any(glob.glob(os.path.join(d, "*.json")) for d in _ICD_DIRS)


def _missing_debs(names: tuple[str, ...]) -> list[str]:
    # One query for all: a line per installed or known package (one per architecture);
    # unknown names only earn a message on stderr (and a non-zero exit status).
    result = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package}\t${Status}\n", *names],
        capture_output=True,
        text=True,
        check=False,
    )
    installed = {
        line.split("\t", 1)[0]
        for line in result.stdout.splitlines()
        if line.endswith("install ok installed")
    }
    return [name for name in names if name not in installed]


def _apt_install(packages: list[str]) -> None:
    if not packages:
        return
    prefix: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            raise SystemExit(f"ssmviz setup: need root to install {' '.join(packages)}")
        prefix = ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    _say(f"installing system packages: {' '.join(packages)}")
    subprocess.run([*prefix, "apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(
        [*prefix, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
        check=True,
        env=env,
    )


def install_system_packages(*, for_tests: bool) -> None:
    """Install what is missing; skipped where there is no apt-get (not Debian/Ubuntu)."""
    if shutil.which("apt-get") is None or shutil.which("dpkg-query") is None:
        if not _has_vulkan_driver():
            _say("warning: no Vulkan driver found and no apt-get to install lavapipe")
        return
    wanted: list[str] = []
    if not _has_vulkan_driver():
        wanted += ["mesa-vulkan-drivers", "libvulkan1"]
    wanted += _QT_PACKAGES
    if for_tests:
        wanted += _TEST_PACKAGES
    _apt_install(_missing_debs(tuple(dict.fromkeys(wanted))))


def _install_stamp(extra: str) -> str:
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    return f"{digest}:{extra}:{sys.version_info[:2]}"


def ensure_venv(*, extra: str) -> Path:
    """Create ``.venv`` and install ssmviz (editable) with ``extra``; returns its python."""
    python = VENV / "bin" / "python"
    if not python.exists():
        _say(f"creating virtual environment {VENV}")
        made = subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=False)
        if made.returncode != 0 and shutil.which("apt-get"):
            # Debian ships ensurepip separately; a half-made .venv is removed first.
            shutil.rmtree(VENV, ignore_errors=True)
            _apt_install([f"python3.{sys.version_info.minor}-venv"])
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        elif made.returncode != 0:
            raise SystemExit("ssmviz setup: cannot create a virtual environment (python3 -m venv)")
    stamp = VENV / ".ssmviz-installed"
    want = _install_stamp(extra)
    if not stamp.exists() or stamp.read_text() != want:
        spec = f".[{extra}]" if extra else "."
        _say(f"installing ssmviz{'[' + extra + ']' if extra else ''} into {VENV}")
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True, cwd=ROOT)
        subprocess.run([*pip, "-e", spec], check=True, cwd=ROOT)
        stamp.write_text(want)
    return python


def _node_tools() -> tuple[str | None, str | None]:
    return shutil.which("node") or shutil.which("nodejs"), shutil.which("npm")


def ensure_tint() -> bool:
    """Node.js, npm and the pinned ``webgpu`` package (dawn.node, with Tint) and
    ``@seanhogg/builderforce-memory-engine`` in ``TINT_DIR/node_modules``; True when
    Tint can run. Never fatal: without it ssmviz works and its kernel reports say the
    cross-check is unavailable."""
    node, npm = _node_tools()
    if (node is None or npm is None) and shutil.which("apt-get") and shutil.which("dpkg-query"):
        wanted = (("nodejs",) if node is None else ()) + (("npm",) if npm is None else ())
        try:
            _apt_install(_missing_debs(wanted))
        except (subprocess.CalledProcessError, SystemExit) as exc:
            _say(f"warning: could not install {' '.join(wanted)}: {exc}")
        node, npm = _node_tools()
    if node is None or npm is None:
        _say("warning: Tint cross-check unavailable: Node.js and npm not found")
        return False
    lock = TINT_DIR / "package-lock.json"
    stamp = TINT_DIR / "node_modules" / ".ssmviz-installed"
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=False)
    want = f"{hashlib.sha256(lock.read_bytes()).hexdigest()}:{version.stdout.strip()}"
    if stamp.exists() and stamp.read_text() == want:
        return True
    _say("installing Tint (npm package webgpu, dawn.node) and @seanhogg/builderforce-memory-"
         f"engine into {TINT_DIR / 'node_modules'}")
    done = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                          cwd=TINT_DIR, check=False)
    if done.returncode != 0:
        _say(f"warning: Tint cross-check unavailable: npm ci failed (status {done.returncode})")
        return False
    stamp.write_text(want)
    return True


def private_runtime_dir(env: MutableMapping[str, str]) -> str | None:
    """Point ``env``'s XDG_RUNTIME_DIR at a new private folder when it is unset or not a
    folder; returns that folder (None when the current one is kept).

    lavapipe prints "error: XDG_RUNTIME_DIR is invalid or not set" for each instance it
    creates, and Qt warns too; a private folder (mode 0700) silences both.
    """
    current = env.get("XDG_RUNTIME_DIR")
    if current and os.path.isdir(current):
        return None
    folder = tempfile.mkdtemp(prefix="ssmviz-xdg-")
    os.chmod(folder, 0o700)
    env["XDG_RUNTIME_DIR"] = folder
    return folder


def _runtime_env(*, offscreen: bool) -> dict[str, str]:
    env = dict(os.environ)
    private_runtime_dir(env)
    if offscreen:
        env["QT_QPA_PLATFORM"] = "offscreen"
    return env


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("app", "test"):
        print(__doc__)
        return 2
    mode, rest = args[0], args[1:]
    if sys.version_info < (3, 11):  # noqa: UP036 - this file runs before the venv exists
        raise SystemExit("ssmviz needs Python 3.11 or newer")
    install_system_packages(for_tests=mode == "test")
    python = ensure_venv(extra="test" if mode == "test" else "")
    ensure_tint()
    bindir = python.parent
    if mode == "app":
        env = _runtime_env(offscreen=False)
        return subprocess.run([str(bindir / "ssmviz"), *rest], env=env, check=False).returncode
    env = _runtime_env(offscreen=True)
    _say("ruff check")
    lint = subprocess.run([str(bindir / "ruff"), "check", "."], cwd=ROOT, env=env, check=False)
    if lint.returncode != 0:
        return lint.returncode
    _say("lint-imports (the import contracts in pyproject.toml)")
    contracts = subprocess.run([str(bindir / "lint-imports")], cwd=ROOT, env=env, check=False)
    if contracts.returncode != 0:
        return contracts.returncode
    _say("pytest")
    return subprocess.run(
        [str(python), "-m", "pytest", *rest], cwd=ROOT, env=env, check=False
    ).returncode


if __name__ == "__main__":
    sys.exit(main())
