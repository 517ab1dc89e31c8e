"""Debugging kernels written by others: load WGSL from .wgsl files or JS/TS modules, map
every line back to the original file, build it with naga and with Tint (Chrome's compiler,
:mod:`ssmviz.core.external.tint`), lint what both miss, run under an ABI profile and
judge against the float64 reference, with race probes and hot reload. Qt-free.
"""

from ssmviz.core.expr import evaluate
from ssmviz.core.external.analysis import analyze
from ssmviz.core.external.command import (
    FileWatcher,
    run_kernel_check,
    watch_kernel,
)
from ssmviz.core.external.diagnostics import Diagnostic, parse_naga_error
from ssmviz.core.external.live import LiveRun, run_live
from ssmviz.core.external.loader import KernelFile, KernelSource, load_kernel_file
from ssmviz.core.external.profiles import (
    builtin_profiles,
    detect_profile,
    get_profile,
    load_profile_file,
    parse_profile,
    parse_profile_text,
)
from ssmviz.core.external.report import KernelCheckResult
from ssmviz.core.external.runner import check_kernel
from ssmviz.core.families.abi import AbiProfile

__all__ = [
    "AbiProfile",
    "Diagnostic",
    "FileWatcher",
    "KernelCheckResult",
    "KernelFile",
    "KernelSource",
    "LiveRun",
    "analyze",
    "builtin_profiles",
    "check_kernel",
    "detect_profile",
    "evaluate",
    "get_profile",
    "load_kernel_file",
    "load_profile_file",
    "parse_naga_error",
    "parse_profile",
    "parse_profile_text",
    "run_kernel_check",
    "run_live",
    "watch_kernel",
]
