"""Bit-identity guard: SHA-256 of every output of both families, for refactors and kernel work.

Hashes the built input arrays, the float64 reference's outputs and every GPU output of
S6 and SSD over several sizes, every forward/backward variant and both conventions, with
and without subgroup operations (``SSMVIZ_SUBGROUPS=0`` in a child process). Two runs
of the same code on the same adapter print the same digests; a change that moves no bit
leaves them equal. A variant the planner refuses digests as its one-line error, so a
changed refusal shows too.

    python tests/digests.py > before.json        # on main
    python tests/digests.py > after.json          # after the change
    python tests/digests.py --compare before.json after.json

``--size bench`` hashes the bench and sweep sizes instead (for the H200).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np


def _digest(arrays: Mapping[str, Any]) -> str:
    h = hashlib.sha256()
    for key in sorted(arrays):
        a = np.ascontiguousarray(arrays[key])
        h.update(f"{key}:{a.dtype.str}:{a.shape};".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:24]


def _s6_cases(size: str) -> Iterator[dict[str, Any]]:
    if size == "bench":
        shapes = [(8, 8192, 1024, 16), (1, 1 << 20, 4, 16), (2, 1000, 2048, 16), (3, 4097, 4, 16)]
    else:
        shapes = [(1, 1, 3, 4), (1, 7, 5, 16), (3, 64, 5, 16), (2, 300, 64, 16), (1, 1000, 4, 5),
                  (2, 257, 33, 16), (1, 4097, 4, 16), (2, 40, 160, 8)]
    for (b, t, d, n), conv in itertools.product(shapes, ("mamba", "builderforce")):
        modes = [("auto", "auto", False), ("auto", "auto", True)]
        if size != "bench":
            modes += [(f, bm, s) for f, bm, s in itertools.product(
                ("onepass", "chunked"), ("stored", "checkpoint", "recompute"), (False, True))]
        for fwd_mode, bwd_mode, store_h in modes:
            yield dict(shape=(b, t, d, n), convention=conv, fwd_mode=fwd_mode,
                       bwd_mode=bwd_mode, store_h=store_h)


def _ssd_cases(size: str) -> Iterator[dict[str, Any]]:
    if size == "bench":
        shapes = [(1, 16384, 32, 64, 1, 128, 256), (1, 16384, 4, 8, 2, 16, 64)]
    else:
        shapes = [(1, 1, 2, 4, 1, 8, 16), (2, 63, 4, 16, 1, 16, 16), (2, 65, 4, 16, 2, 16, 64),
                  (1, 1000, 4, 8, 2, 16, 256), (1, 129, 2, 5, 1, 7, 32)]
    for (b, t, h, p, g, n, q), conv, store in itertools.product(
        shapes, ("mamba", "builderforce"), (False, True)
    ):
        yield dict(shape=(b, t, h, p, g, n, q), convention=conv, store_states=store)


def _s6_kernel(rt: Any) -> Any:
    try:
        from ssmviz.core.families.s6.kernel import S6Kernel
    except ImportError:
        from ssmviz.core.kernels.s6 import S6Kernel
    return S6Kernel(rt)


def _ssd_kernel(rt: Any) -> Any:
    try:
        from ssmviz.core.families.ssd.kernel import SSDKernel
    except ImportError:
        from ssmviz.core.kernels.ssd import SSDKernel
    return SSDKernel(rt)


def _reference(family: str, inputs: Mapping[str, np.ndarray], conv: str,
               chunk_len: int | None) -> dict[str, np.ndarray]:
    from ssmviz.core.check import reference

    try:
        from ssmviz.core.case import Case
    except ImportError:  # before the Case value
        return reference(family, inputs, conv, chunk_len)
    from ssmviz.core import families  # a Case holds the family's record, not its name

    return reference(Case.of_arrays(families.get(family), inputs, convention=conv,
                                    run={"chunk_len": chunk_len}))


def gpu_digests(size: str, with_reference: bool) -> dict[str, str]:
    """Digests of this process's adapter and subgroup setting."""
    from ssmviz.core.errors import SsmvizError
    from ssmviz.core.gpu import get_runtime
    from ssmviz.core.problem import Problem
    from ssmviz.core.signals import SignalSpec

    rt = get_runtime()
    out: dict[str, str] = {}
    s6, ssd = _s6_kernel(rt), _ssd_kernel(rt)
    seen_inputs: set[str] = set()
    for c in _s6_cases(size):
        b, t, d, n = c["shape"]
        p = Problem(family="s6", convention=c["convention"], batch=b, seq_len=t, d_inner=d,
                    d_state=n, signal=SignalSpec(name="noise", seed=t), seed=t)
        arrays = p.build()
        base = f"s6 {b}x{t}x{d}x{n} {c['convention']}"
        if base not in seen_inputs:
            seen_inputs.add(base)
            out[f"{base} inputs"] = _digest(arrays)
            if with_reference:
                out[f"{base} reference"] = _digest(_reference("s6", arrays, c["convention"], None))
        name = f"{base} fwd={c['fwd_mode']} bwd={c['bwd_mode']} store_h={c['store_h']}"
        try:
            res = s6.run(arrays, convention=c["convention"], store_h=c["store_h"],
                         fwd_mode=c["fwd_mode"], bwd_mode=c["bwd_mode"])
            out[name] = _digest(res.outputs)
        except SsmvizError as exc:
            out[name] = f"error: {exc}"
    for c in _ssd_cases(size):
        b, t, h, pp, g, n, q = c["shape"]
        p = Problem(family="ssd", convention=c["convention"], batch=b, seq_len=t, n_heads=h,
                    d_head=pp, n_groups=g, d_state=n, chunk_len=q,
                    signal=SignalSpec(name="noise", seed=t), seed=t)
        arrays = p.build()
        base = f"ssd {b}x{t}x{h}x{pp} g{g} n{n} q{q} {c['convention']}"
        if base not in seen_inputs:
            seen_inputs.add(base)
            out[f"{base} inputs"] = _digest(arrays)
            if with_reference:
                out[f"{base} reference"] = _digest(_reference("ssd", arrays, c["convention"], q))
        name = f"{base} store_states={c['store_states']}"
        try:
            res = ssd.run(arrays, chunk_len=q, convention=c["convention"],
                          store_states=c["store_states"])
            out[name] = _digest(res.outputs)
        except SsmvizError as exc:
            out[name] = f"error: {exc}"
    out["adapter"] = rt.description()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=("small", "bench"), default="small")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.compare:
        before, after = (json.loads(Path(f).read_text()) for f in args.compare)
        diff = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        for k in diff:
            print(f"DIFF {k}: {before.get(k)} -> {after.get(k)}")
        print(f"{len(before)} digests before, {len(after)} after, {len(diff)} differ")
        return 1 if diff else 0
    if args.child:
        json.dump(gpu_digests(args.size, with_reference=False), sys.stdout)
        return 0
    own = gpu_digests(args.size, with_reference=args.size == "small")
    result = {f"subgroups {k}": v for k, v in own.items()}
    env = dict(os.environ, SSMVIZ_SUBGROUPS="0")
    child = subprocess.run([sys.executable, __file__, "--child", "--size", args.size], env=env,
                           capture_output=True, text=True, check=True)
    result.update({f"no-subgroups {k}": v for k, v in json.loads(child.stdout).items()})
    json.dump(result, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
