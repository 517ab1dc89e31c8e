"""Reading an inputs archive (``ssmviz check --inputs PATH.npz``, the app's inputs file).

:func:`open_inputs` reads only the archive's array headers (shape and dtype of every
key) and its JSON ``meta``, so that the sizes can be checked against the device and the
RAM before any data is read: a small file whose shapes claim terabytes is refused
without allocating. :meth:`InputsFile.load` then reads the family's input keys.

Types: float32 is used as it is, float64 is rounded to float32 (what the GPU gets, and so
what the reference gets too; a value float32 cannot hold is named), float16 is widened to
float32 (exact),
with a note. Every other dtype (integer, bool, complex, object, string, structured) is
refused in one line naming the key and the dtype: a cast would drop information (the
imaginary part) or turn labels into numbers, and the result would look valid.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ssmviz.core import families
from ssmviz.core.errors import SsmvizError
from ssmviz.core.reference._common import CONVENTIONS

#: The meta entry is a short JSON text; anything far longer is not ssmviz's.
MAX_META_CHARS = 1 << 20


def dtype_problem(key: str, dtype: np.dtype) -> str:
    """'' when ``dtype`` is accepted for an input, else the one-line reason."""
    if dtype.names is not None:
        return f"inputs key '{key}' is a structured array (dtype {dtype}); need float32 or float64"
    if dtype.hasobject:
        return f"inputs key '{key}' holds Python objects (dtype object); need float32 or float64"
    if dtype.kind == "f" and dtype.itemsize in (2, 4, 8):
        return ""
    kind = {"b": "bool", "i": "integer", "u": "integer", "c": "complex", "U": "string",
            "S": "bytes", "V": "raw bytes", "M": "datetime", "m": "timedelta"}.get(dtype.kind,
                                                                                   "non-float")
    return (f"inputs key '{key}' is {kind} (dtype {dtype}); need float32 or float64 "
            "(float16 is accepted)")


@dataclass
class _Header:
    member: str
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran: bool


@dataclass
class InputsFile:
    """An opened inputs archive: every key's header and the parsed ``meta`` (None when the
    archive has none); no array data read yet."""

    path: str
    headers: dict[str, _Header]
    meta: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)

    @property
    def meta_family(self) -> families.Family | None:
        """The family the meta names (checked when the archive was opened), or None."""
        name = None if self.meta is None else self.meta.get("family")
        return None if name is None else families.get(name)

    @property
    def meta_convention(self) -> str | None:
        return None if self.meta is None else self.meta.get("convention")

    @property
    def meta_sizes(self) -> dict[str, int]:
        return {} if self.meta is None else dict(self.meta.get("sizes") or {})

    def guess_family(self) -> families.Family:
        """The family the keys say: the first registered one whose input keys the archive
        holds most of (an SSD archive has ``x``, ``dt`` ... and no ``u``)."""
        def held(family: families.Family) -> int:
            return sum(k in self.headers for k in family.input_keys)

        return max(families.every(), key=held)  # the first of equal counts

    def _checked_headers(self, family: families.Family) -> dict[str, _Header]:
        keys = family.inputs_of(self.meta_convention)
        for key in keys:
            if key not in self.headers:
                raise SsmvizError(f"inputs {self.path} lack the key '{key}' "
                                  f"(need {', '.join(keys)})")
        for key in keys:
            problem = dtype_problem(key, self.headers[key].dtype)
            if problem:
                raise SsmvizError(problem)
        return {k: self.headers[k] for k in keys}

    def sizes(self, family: families.Family) -> dict[str, int]:
        """The sizes the input keys' shapes imply (no data read); shape and dtype
        mismatches are one-line errors."""
        stand_ins = {}
        for key, h in self._checked_headers(family).items():
            try:
                # A zero-stride view: the shape and dtype without the memory.
                stand_ins[key] = np.broadcast_to(np.zeros((), h.dtype), h.shape)
            except (ValueError, MemoryError) as exc:
                raise SsmvizError(f"inputs key '{key}' has an impossible shape {h.shape}") from exc
        return family.infer_sizes(stand_ins)

    def load(self, family: families.Family) -> dict[str, np.ndarray]:
        """The family's input arrays (float32 or float64); adds a note per float16 key and
        one for keys that are not used."""
        headers = self._checked_headers(family)
        self.sizes(family)
        arrays: dict[str, np.ndarray] = {}
        try:
            with zipfile.ZipFile(self.path) as zf:
                for key, h in headers.items():
                    arrays[key] = _read_array(zf, key, h, self.path)
        except SsmvizError:
            raise
        except Exception as exc:  # a corrupt archive: zipfile, zlib and OS errors
            raise SsmvizError(f"cannot read inputs file {self.path}: {_reason(exc)}") from exc
        half = [k for k, a in arrays.items() if a.dtype == np.float16]
        for k in half:
            arrays[k] = arrays[k].astype(np.float32)
        if half:
            self.notes.append(f"{', '.join(half)} stored as float16: widened to float32 "
                              "(exact; the kernel and the reference see the float16 values)")
        self.notes += to_float32(arrays)
        unused = sorted(k for k in self.headers if k not in headers and k != "meta"
                        and not k.startswith(("gpu_", "ref_")))
        if unused:
            self.notes.append(f"keys not used by {family.name}: {', '.join(unused)}")
        return arrays


def to_float32(arrays: dict[str, np.ndarray]) -> list[str]:
    """Round float64 arrays to float32 in place -- what the GPU gets, so the float64
    reference gets exactly that too -- and name the values float32 cannot hold: finite
    ones that overflow to ±inf, non-zero ones below its normal range (subnormal or 0)."""
    notes = []
    tiny = np.finfo(np.float32).tiny
    for key, a in arrays.items():
        if a.dtype != np.float64:
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            f = a.astype(np.float32)
            over = np.isfinite(a) & ~np.isfinite(f)
            under = (a != 0) & np.isfinite(a) & (np.abs(f) < tiny)
        if over.any():
            notes.append(f"warning: {key}: {int(over.sum())} value(s) overflow float32 (e.g. "
                         f"{a[over].flat[0]:.3g} becomes {f[over].flat[0]}); the GPU and the "
                         "reference get inf")
        if under.any():
            notes.append(f"warning: {key}: {int(under.sum())} value(s) below float32's normal "
                         f"range (e.g. {a[under].flat[0]:.3g} becomes {f[under].flat[0]:.3g}); "
                         "the GPU and the reference get the float32 value")
        arrays[key] = f
    return notes


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:160]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _read_array(zf: zipfile.ZipFile, key: str, h: _Header, path: str) -> np.ndarray:
    try:
        with zf.open(h.member) as fh:
            arr = np.lib.format.read_array(fh, allow_pickle=False)
    except MemoryError as exc:
        raise SsmvizError(f"not enough memory to read '{key}' {h.shape} of {path}") from exc
    except Exception as exc:
        raise SsmvizError(f"inputs key '{key}' of {path} cannot be read: {_reason(exc)}") from exc
    if arr.shape != h.shape or arr.dtype != h.dtype:
        raise SsmvizError(f"inputs key '{key}' of {path} does not match its own header")
    return arr


def _read_header(zf: zipfile.ZipFile, member: str) -> _Header:
    with zf.open(member) as fh:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    return _Header(member, tuple(int(n) for n in shape), np.dtype(dtype), bool(fortran))


def _parse_meta(zf: zipfile.ZipFile, h: _Header, path: str) -> dict[str, Any]:
    where = f"the meta of {path}"
    if h.shape != () or h.dtype.kind not in "US" or h.dtype.itemsize > 4 * MAX_META_CHARS:
        raise SsmvizError(f"{where} must be one JSON string; got dtype {h.dtype} shape {h.shape}")
    text = str(_read_array(zf, "meta", h, path)[()])
    try:
        meta = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise SsmvizError(f"{where} is not valid JSON") from exc
    if not isinstance(meta, dict):
        raise SsmvizError(f"{where} must be a JSON object; got {type(meta).__name__}")
    family, convention = meta.get("family"), meta.get("convention")
    if family is not None and family not in families.names():
        raise SsmvizError(f"{where} names family {family!r}; need one of "
                          f"{', '.join(families.names())}")
    if convention is not None and convention not in CONVENTIONS:
        raise SsmvizError(f"{where} names convention {convention!r}; need one of "
                          f"{', '.join(CONVENTIONS)}")
    sizes = meta.get("sizes")  # the export writes every size of its family
    if sizes is not None:
        if not isinstance(sizes, dict):
            raise SsmvizError(f"{where}: sizes must be an object; got {type(sizes).__name__}")
        for k, v in sizes.items():
            if k in families.sizes() and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise SsmvizError(f"{where}: size {k} must be an integer ≥ 1; got {v!r}")
    return meta


def open_inputs(path: str) -> InputsFile:
    """Open an inputs archive: headers and meta only. One-line SsmvizError for a missing,
    unreadable or corrupt file, or one that is not a regular file (a FIFO, a device)."""
    from ssmviz.core.fileio import regular_file

    regular_file(path, "inputs")
    try:
        with zipfile.ZipFile(path) as zf:
            headers: dict[str, _Header] = {}
            for info in zf.infolist():
                name = info.filename
                if not name.endswith(".npy"):
                    continue
                key = name[:-4]
                try:
                    headers[key] = _read_header(zf, name)
                except Exception as exc:
                    raise SsmvizError(f"inputs key '{key}' of {path} has a corrupt header: "
                                      f"{_reason(exc)}") from exc
            meta = _parse_meta(zf, headers.pop("meta"), path) if "meta" in headers else None
    except SsmvizError:
        raise
    except FileNotFoundError as exc:
        raise SsmvizError(f"inputs file not found: {path}") from exc
    except IsADirectoryError as exc:
        raise SsmvizError(f"inputs {path} is a directory, not an .npz file") from exc
    except zipfile.BadZipFile as exc:
        raise SsmvizError(f"inputs {path} is not an .npz archive ({_reason(exc)})") from exc
    except Exception as exc:  # OS errors, zlib errors, a truncated archive
        raise SsmvizError(f"cannot read inputs file {path}: {_reason(exc)}") from exc
    if not headers:
        raise SsmvizError(f"inputs {path} holds no arrays")
    return InputsFile(str(path), headers, meta)
