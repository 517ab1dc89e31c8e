"""Loaders, ABI descriptions and runners for ssmviz's own WGSL kernels."""
