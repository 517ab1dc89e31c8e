"""Shader-module creation: wgpu's ``create_shader_module`` without wgpu-native's stray log
lines, and the trusted path (no runtime checks) for ssmviz's own shaders."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import wgpu


class _NativeLogFilter(logging.Filter):
    """Drops wgpu-native's own log lines while this thread builds a shader module.

    naga's validator logs debug text at error level (e.g. "Access type Scalar(...)" for
    an invalid access); it reaches stderr through the "wgpu" logger. A failed build
    arrives as the exception, with naga's whole message, so those lines only add noise.
    Other wgpu messages (and native lines outside a build) pass.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not (getattr(_building, "active", False) and record.funcName == "_logger_callback")


_building = threading.local()
# wgpu's logger ("wgpu") is of wgpu's own class, made when wgpu is imported: reached
# through wgpu, so that logging.getLogger never makes a plain one first.
wgpu.logger.addFilter(_NativeLogFilter())


def trusted_modules_enabled() -> bool:
    """Whether ssmviz's own shaders may be built without runtime checks (the default);
    ``SSMVIZ_TRUSTED=0`` builds every module with wgpu's bounds checks and loop bounding."""
    return os.environ.get("SSMVIZ_TRUSTED", "").strip().lower() not in ("0", "off", "no")


def create_shader_module(device: Any, code: str, label: str = "", *, trusted: bool = False) -> Any:
    """``device.create_shader_module`` without wgpu-native's stray log lines.

    ``trusted``: the source is one of ssmviz's own shaders, which never index out of bounds
    and whose loops all end (tests/test_guard_bands.py checks both on lavapipe); it is then
    built by wgpu-native's ``wgpuDeviceCreateShaderModuleTrusted`` with no runtime checks
    (no bounds clamping, no forced loop bounding), unless :func:`trusted_modules_enabled`
    says no or the library lacks that function. Never pass it for a kernel from a file.
    """
    _building.active = True
    try:
        if trusted and trusted_modules_enabled():
            module = _create_trusted_module(device, code, label)
            if module is not None:
                return module
        return device.create_shader_module(code=code, label=label)
    finally:
        _building.active = False


def _create_trusted_module(device: Any, code: str, label: str) -> Any:
    """A WGSL module built with runtime checks 0 through wgpu-py's cffi library (wgpu-py
    does not wrap the call), or None when that is not possible here."""
    try:
        from wgpu.backends.wgpu_native import _api

        create = _api.libf.wgpuDeviceCreateShaderModuleTrusted
        internal = device._internal
    except (ImportError, AttributeError):
        return None
    ffi, lib = _api.ffi, _api.lib
    code_c = ffi.new("char[]", code.encode("utf-8"))
    label_c = ffi.new("char[]", label.encode("utf-8"))
    source = ffi.new("WGPUShaderSourceWGSL *")
    source.chain.next = ffi.NULL
    source.chain.sType = lib.WGPUSType_ShaderSourceWGSL
    source.code.data = code_c
    source.code.length = len(code_c) - 1
    descriptor = ffi.new("WGPUShaderModuleDescriptor *")
    descriptor.nextInChain = ffi.cast("WGPUChainedStruct *", source)
    descriptor.label.data = label_c
    descriptor.label.length = len(label_c) - 1
    # libf raises wgpu's validation errors as exceptions, as create_shader_module does.
    handle = create(internal, descriptor, 0)  # WGPUShaderRuntimeChecks_None
    if handle == ffi.NULL:
        raise RuntimeError("Shader module creation failed")
    return _api.GPUShaderModule(label, handle, device)

