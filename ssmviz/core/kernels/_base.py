"""What every kernel runner shares: the runtime it runs on and its WGSL source."""

from __future__ import annotations

from ssmviz.core.gpu import GpuRuntime, get_runtime
from ssmviz.core.resources import shader_source


class ShaderKernel:
    """A kernel family's runner over ``shaders/<SHADER>`` (or a user-given source)."""

    SHADER: str = ""

    def __init__(self, runtime: GpuRuntime | None = None, source: str | None = None) -> None:
        self.rt = runtime if runtime is not None else get_runtime()
        # A user-given source (the app's shader editor, `check --kernel`) runs under the
        # same host code and ABI as the built-in one.
        self.source = source if source is not None else shader_source(self.SHADER)
