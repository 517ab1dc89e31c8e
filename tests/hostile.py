"""Kernels that hang or crash ssmviz's compiler/driver, made from the shipped reference.

lavapipe stops every loop of an invocation after 65535 iterations in all (a spin loop
only burns that budget; nested loops share it), so :func:`spin_kernel` spins with a loop
of 65000 iterations whose body is a long chain of integer mixing steps that nothing can
fold, each with a data-dependent integer division (the CPU has no vector division:
lavapipe runs it lane by lane). Measured on the 2-core machine (2026-12-03): 256
one-invocation workgroups of that loop took 69 s with the division and 6.7 s without,
and without it a one-run check of the tiny problem (1, 20, 3, 2) finished inside the
tests' 2 s deadline; with it every invocation spins far past the tests' 2-3 s deadlines.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "assets" / "kernels" / "builderforce_reference.js"
#: The forward entry's first lines, before which the spin goes (every invocation spins).
_ANCHOR = "  let d = wid.x;\n  let n = wid.y;\n  let b = wid.z;\n  if (lid.x != 0u"


def spin_kernel(steps: int = 400) -> str:
    """builderforce_reference.js whose `forward_scan` spins for minutes."""
    src = REFERENCE.read_text(encoding="utf-8")
    assert src.count(_ANCHOR) == 1
    body = "\n".join("    spin = (spin ^ (spin >> 13u)) * 1540483477u + spin / ((spin & 15u) + 3u);"
                     for _ in range(steps))
    spin = ("  var spin = lid.x + wid.x;\n"
            "  for (var i1 = 0u; i1 < 65000u; i1 = i1 + 1u) {\n" + body + "\n  }\n"
            "  if (spin == 7u) { return; }\n")
    return src.replace(_ANCHOR, spin + _ANCHOR)


def deep_parens_wgsl(depth: int = 3000) -> str:
    """A .wgsl whose one expression nests ``depth`` parentheses (naga overflows its stack)."""
    return ("@group(0) @binding(0) var<storage, read_write> o: array<f32>;\n"
            "@compute @workgroup_size(1) fn main() { o[0] = "
            + "(" * depth + "1.0" + ")" * depth + "; }\n")


def deep_parens_js(depth: int = 3000) -> str:
    """builderforce_reference.js with a helper whose expression nests ``depth`` parentheses."""
    src = REFERENCE.read_text(encoding="utf-8")
    anchor = "fn sigmoid(z: f32) -> f32 { return 1.0 / (1.0 + exp(-z)); }"
    assert src.count(anchor) == 1
    deep = "\nfn deep_() -> f32 { return " + "(" * depth + "1.0" + ")" * depth + "; }"
    return src.replace(anchor, anchor + deep)


def deep_templates_js(depth: int = 3000) -> str:
    """A JS module whose template literals nest ``depth`` deep (`` `${`${...}`}` ``)."""
    return "export const K = " + "`${" * depth + "1" + "}`" * depth + ";\n"


def deep_blocks_wgsl(depth: int = 3000) -> str:
    """A .wgsl with ``depth`` nested if-blocks in its entry point."""
    return ("@group(0) @binding(0) var<storage, read_write> o: array<f32>;\n"
            "@compute @workgroup_size(1) fn main() {\n  var x = 1.0;\n"
            + "if (x > 0.0) {" * depth + "x = 2.0;" + "}" * depth + "\n  o[0] = x;\n}\n")


def huge_private_kernel() -> str:
    """builderforce_reference.js whose forward_scan holds a 64 MB ``var<private>`` array:
    lavapipe's LLVM then compiles its pipeline for minutes (measured: still compiling
    after 20 s)."""
    src = REFERENCE.read_text(encoding="utf-8")
    anchor = "@compute @workgroup_size(64)\nfn forward_scan"
    assert src.count(anchor) == 1 and src.count(_ANCHOR) == 1
    src = src.replace(anchor, "var<private> big: array<f32, 16000000>;\n" + anchor)
    use = "  big[lid.x * 1000u] = 1.0;\n  if (big[wid.x] == 3.0) { return; }\n"
    return src.replace(_ANCHOR, use + _ANCHOR)
