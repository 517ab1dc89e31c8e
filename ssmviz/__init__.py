"""ssmviz: a visualiser and debugger for state-space-model (Mamba S6 / Mamba-2 SSD) GPU kernels.

This top-level module imports nothing beyond the standard library, so that
``python3 -m ssmviz.bootstrap`` can run before any dependency is installed.
"""

__version__ = "0.1.0"
