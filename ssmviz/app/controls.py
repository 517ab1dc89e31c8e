"""The control panel: every Problem field, the view selection and an inputs file.

Each change builds a candidate :class:`Problem` and validates it with the core;
a bad value is refused here (the field turns red and the SsmvizError text shows
under the controls) and never reaches the worker. Spin boxes allow values the
core rejects on purpose, so the core stays the one judge of what is valid; they hold
every value the core accepts (floats exactly, in scientific notation, within ±FLOAT_LIMIT),
so a session never changes on its way through the controls.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from ssmviz.app.derived import Selection, sizes_of
from ssmviz.core import families
from ssmviz.core.check import load_inputs_npz
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families import Family
from ssmviz.core.fields import FLOAT_LIMIT
from ssmviz.core.problem import A_INITS, CONVENTIONS, DY_KINDS, SELECTIONS, Problem
from ssmviz.core.signals import SIGNAL_NAMES

BAD_STYLE = "background-color: #ffd6d6;"
INT_RANGE = (-(2**31) + 1, 2**31 - 1)


def user_sizes(family: Family | None) -> tuple[str, ...]:
    """The sizes a user sets for ``family`` (its default sizes' names; none for no
    family): one control each."""
    return () if family is None else tuple(family.default_sizes)


def chosen_family(name: str) -> Family | None:
    """The family the family combo box names (where the app looks a family up by its
    name), None for a name no family has."""
    return families.get(name) if name in families.names() else None


def _family_of(keys: set[str]) -> Family:
    """The family of an inputs file with these keys: the first (registry order) whose
    inputs it all holds, else the first whose first input it holds (loading then names
    what is missing), else the first family."""
    every = families.every()
    for fits in (lambda f: set(f.input_keys) <= keys, lambda f: f.input_keys[0] in keys):
        for family in every:
            if fits(family):
                return family
    return every[0]


@dataclass(frozen=True)
class FieldSpec:
    """One control: ``path`` into Problem.to_dict() ("seq_len", "signal.amplitude")."""

    path: str
    kind: str  # "int" | "float" | "choice" | "text"
    group: str
    #: The choices, or what gives them when the widget is made (the registered families).
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] = ()
    #: Steps multiply or divide (step sizes span decades, e.g. dt_min = 1e-7).
    log: bool = False

    def options(self) -> tuple[str, ...]:
        return self.choices() if callable(self.choices) else self.choices

    def shown_for(self, family: Family | None) -> bool:
        """A size control shows for the families whose user sets that size."""
        return self.path not in families.sizes() or self.path in user_sizes(family)

    @property
    def label(self) -> str:
        return self.path.split(".")[-1]

    @property
    def token(self) -> str:
        """How SsmvizError messages name this field ("seq_len", "signal frequency")."""
        head, _, tail = self.path.rpartition(".")
        return f"{head} {tail}" if head else tail


FIELDS = (
    FieldSpec("family", "choice", "Problem", families.names),
    FieldSpec("convention", "choice", "Problem", CONVENTIONS),
    FieldSpec("seed", "int", "Problem"),
    FieldSpec("dy", "choice", "Problem", DY_KINDS),
    # One control per size the families declare (their sizes.py), in its control group.
    *(FieldSpec(name, "int", size.group) for name, size in families.sizes().items()),
    FieldSpec("signal.name", "choice", "Input signal", SIGNAL_NAMES),
    FieldSpec("signal.amplitude", "float", "Input signal"),
    FieldSpec("signal.frequency", "float", "Input signal"),
    FieldSpec("signal.offset", "float", "Input signal"),
    FieldSpec("signal.phase_step", "float", "Input signal"),
    FieldSpec("signal.channel_offset", "float", "Input signal"),
    FieldSpec("signal.seed", "int", "Input signal"),
    FieldSpec("signal.onset", "float", "Input signal"),
    FieldSpec("signal.path", "text", "Input signal"),
    FieldSpec("init.A", "choice", "Parameter init", A_INITS),
    FieldSpec("init.A_value", "float", "Parameter init", log=True),
    FieldSpec("init.dt_min", "float", "Parameter init", log=True),
    FieldSpec("init.dt_max", "float", "Parameter init", log=True),
    FieldSpec("init.delta_noise", "float", "Parameter init"),
    FieldSpec("init.D", "float", "Parameter init"),
    FieldSpec("init.bc_scale", "float", "Parameter init"),
    FieldSpec("init.selection", "choice", "Parameter init", SELECTIONS),
)
#: The sizes an inputs file's arrays give (locked while one is open): every size but the
#: run sizes (chunk_len), which the arrays' shapes do not carry.
SIZE_PATHS = tuple(name for name in families.sizes()
                   if not any(s.run for s in families.declarations(name)))


#: What a float entry may look like while being typed ("", "-", "1e", "2.5e-").
_PARTIAL_FLOAT = re.compile(r"[+-]?(\d*\.?\d*)([eE][+-]?\d*)?")
#: One logarithmic step: a quarter decade.
LOG_STEP = 10**0.25


class ScientificSpinBox(QDoubleSpinBox):
    """A float entry that holds any double exactly and shows it in its shortest form
    (``1e-07``, ``0.001``, ``250.0``); with ``log`` its arrows multiply by LOG_STEP.

    QDoubleSpinBox rounds every value to ``decimals()`` places (6 would turn 1e-7 into 0);
    323 places is exact for every double, and the text is Python's round-trip repr.
    """

    def __init__(self, *, log: bool = False, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.log = log
        self.setDecimals(323)
        self.setRange(-FLOAT_LIMIT, FLOAT_LIMIT)
        self.setSingleStep(0.1)

    def textFromValue(self, value: float) -> str:  # Qt override
        return repr(float(value))

    def valueFromText(self, text: str) -> float:  # Qt override
        try:
            return float(text)
        except ValueError:
            return self.value()

    def validate(self, text: str, pos: int) -> object:  # Qt override
        try:
            value = float(text)
        except ValueError:
            ok = _PARTIAL_FLOAT.fullmatch(text.strip()) is not None
            return (QValidator.State.Intermediate if ok else QValidator.State.Invalid, text, pos)
        inside = self.minimum() <= value <= self.maximum()
        return (QValidator.State.Acceptable if inside else QValidator.State.Intermediate,
                text, pos)

    def stepBy(self, steps: int) -> None:  # Qt override
        if self.log and self.value() > 0:
            self.setValue(self.value() * LOG_STEP**steps)
        else:
            super().stepBy(steps)


def _get(data: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        data = data[part]
    return data


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    *heads, last = path.split(".")
    for part in heads:
        data = data.setdefault(part, {})
    data[last] = value


class ControlsPanel(QWidget):
    """Problem controls; emits ``problemChanged(Problem)`` only for valid problems.

    ``viewChanged`` fires when the batch/channel/state selection changes (no re-run
    needed); ``inputsChanged`` when an inputs .npz is opened or cleared.
    """

    problemChanged = Signal(object)
    viewChanged = Signal()
    inputsChanged = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.widgets: dict[str, QWidget] = {}
        self._rows: dict[str, tuple[QFormLayout, QWidget]] = {}
        self._valid: Problem = Problem()
        self.inputs_arrays: dict[str, np.ndarray] | None = None
        self.inputs_path: str | None = None
        self._loading = False

        inner = QWidget()
        col = QVBoxLayout(inner)
        groups: dict[str, QFormLayout] = {}
        for spec in FIELDS:
            if spec.group not in groups:
                box = QGroupBox(spec.group)
                groups[spec.group] = QFormLayout(box)
                col.addWidget(box)
            w = self._make_widget(spec)
            self.widgets[spec.path] = w
            groups[spec.group].addRow(spec.label, w)
            self._rows[spec.path] = (groups[spec.group], w)

        files = QGroupBox("Inputs file (.npz, keys of ssmviz check --inputs)")
        fl = QVBoxLayout(files)
        self.inputs_label = QLabel("generated from the controls")
        self.inputs_label.setWordWrap(True)
        row = QHBoxLayout()
        self.open_inputs_button = QPushButton("Open…")
        self.clear_inputs_button = QPushButton("Clear")
        self.open_inputs_button.clicked.connect(self._browse_inputs)
        self.clear_inputs_button.clicked.connect(self.clear_inputs)
        row.addWidget(self.open_inputs_button)
        row.addWidget(self.clear_inputs_button)
        fl.addWidget(self.inputs_label)
        fl.addLayout(row)
        col.addWidget(files)

        view = QGroupBox("View")
        vf = QFormLayout(view)
        self.view_batch = QSpinBox()
        self.view_channel = QSpinBox()
        self.view_state = QSpinBox()
        for label, w in (("batch entry", self.view_batch), ("channel", self.view_channel),
                         ("state", self.view_state)):
            w.setRange(0, 0)
            w.valueChanged.connect(self._view_edited)
            vf.addRow(label, w)
        col.addWidget(view)
        col.addStretch(1)

        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(inner)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll, 1)
        self.message = QLabel("")
        self.message.setObjectName("controlsMessage")
        self.message.setWordWrap(True)
        outer.addWidget(self.message)
        self.set_problem(Problem())

    # -- widgets -----------------------------------------------------------------------------
    def _make_widget(self, spec: FieldSpec) -> QWidget:
        if spec.kind == "choice":
            w = QComboBox()
            w.addItems(list(spec.options()))
            if spec.path == "family":
                for i, name in enumerate(spec.options()):
                    w.setItemData(i, families.get(name).display_name,
                                  Qt.ItemDataRole.ToolTipRole)
            w.currentTextChanged.connect(self._edited)
        elif spec.kind == "int":
            w = QSpinBox()
            w.setRange(*INT_RANGE)
            w.setKeyboardTracking(True)
            w.valueChanged.connect(self._edited)
        elif spec.kind == "float":
            w = ScientificSpinBox(log=spec.log)
            w.valueChanged.connect(self._edited)
        else:
            w = QLineEdit()
            w.setPlaceholderText(".npy or .csv (signal 'file')")
            w.editingFinished.connect(self._edited)
        w.setObjectName(spec.path)
        return w

    def _read(self, spec: FieldSpec) -> Any:
        w = self.widgets[spec.path]
        if isinstance(w, QComboBox):
            return w.currentText()
        if isinstance(w, QSpinBox | QDoubleSpinBox):
            return w.value()
        text = w.text().strip()
        return text or None

    def _write(self, spec: FieldSpec, value: Any) -> None:
        w = self.widgets[spec.path]
        if isinstance(w, QComboBox):
            w.setCurrentText(str(value))
        elif isinstance(w, QSpinBox):
            w.setValue(int(value))
        elif isinstance(w, QDoubleSpinBox):
            w.setValue(float(value))
        else:
            w.setText(value or "")

    # -- problem -------------------------------------------------------------------------------
    def candidate(self) -> dict[str, Any]:
        """The Problem dict the widgets currently describe (maybe invalid)."""
        data = Problem().to_dict()
        for spec in FIELDS:
            _set(data, spec.path, self._read(spec))
        if "d_inner" not in user_sizes(chosen_family(data["family"])):
            data["d_inner"] = None  # derived (SSD: n_heads·d_head)
        return data

    def problem(self) -> Problem:
        """The last valid problem."""
        return self._valid

    def set_problem(self, problem: Problem) -> None:
        """Show ``problem`` in the widgets without emitting per-field changes."""
        data = problem.to_dict()
        if data["d_inner"] is None:
            given = "d_inner" in user_sizes(problem.family)
            data["d_inner"] = problem.inner if given else Problem().inner
        self._loading = True
        try:
            for spec in FIELDS:
                self._write(spec, _get(data, spec.path))
        finally:
            self._loading = False
        self._edited()

    def set_value(self, path: str, value: Any) -> None:
        """Set one field as a user would (emits like an edit)."""
        spec = next(s for s in FIELDS if s.path == path)
        self._write(spec, value)
        if spec.kind == "text":
            self._edited()

    def _edited(self, *_: Any) -> None:
        if self._loading:
            return
        data = self.candidate()
        family = chosen_family(data["family"])
        for spec in FIELDS:
            form, w = self._rows[spec.path]
            form.setRowVisible(w, spec.shown_for(family))
        try:
            problem = Problem.from_dict(data)
            problem.validate()
            if self.inputs_arrays is not None:
                self._check_inputs_match(problem)
        except SsmvizError as exc:
            self._show_error(str(exc))
            return
        self._show_error("")
        self._valid = problem
        self._update_view_ranges()
        self.problemChanged.emit(problem)

    def _show_error(self, text: str) -> None:
        self.message.setText(text)
        self.message.setStyleSheet("color: #b00020; font-weight: bold;" if text else "")
        bad = self._fields_named(text) if text else set()
        for path, w in self.widgets.items():
            w.setStyleSheet(BAD_STYLE if path in bad else "")

    @staticmethod
    def _fields_named(text: str) -> set[str]:
        hits = set()
        for spec in FIELDS:
            if re.search(rf"(^|[^\w]){re.escape(spec.token)}([^\w]|$)", text):
                hits.add(spec.path)
        if not hits and text.startswith("signal"):
            hits.add("signal.path")
        return hits

    @property
    def error_text(self) -> str:
        return self.message.text()

    # -- inputs file ---------------------------------------------------------------------------
    def _browse_inputs(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open inputs", "", "NumPy archive (*.npz)")
        if path:
            try:
                self.load_inputs(path)
            except SsmvizError as exc:
                self._show_error(str(exc))

    def load_inputs(self, path: str) -> None:
        """Use the arrays of an inputs .npz; the family is read off its keys."""
        try:
            with np.load(path, allow_pickle=False) as data:
                keys = set(data.files)
        except FileNotFoundError as exc:
            raise SsmvizError(f"inputs file not found: {path}") from exc
        except Exception as exc:
            raise SsmvizError(f"cannot read inputs file {path}: {exc}") from exc
        family = _family_of(keys)
        arrays = load_inputs_npz(path, family)
        sizes = sizes_of(family, arrays)
        self.inputs_arrays, self.inputs_path = arrays, str(path)
        self.inputs_label.setText(f"{path}  ({family.name}, " + ", ".join(
            f"{k}={v}" for k, v in sizes.items()) + ")")
        self._lock_sizes(True)
        base = self._valid.to_dict() | {"family": family.name}
        base |= {k: v for k, v in sizes.items() if k in SIZE_PATHS}
        if "d_inner" not in user_sizes(family):
            base["d_inner"] = None  # derived (SSD: n_heads·d_head)
        self.set_problem(Problem.from_dict(base))
        self.inputsChanged.emit()

    def clear_inputs(self) -> None:
        if self.inputs_arrays is None:
            return
        self.inputs_arrays, self.inputs_path = None, None
        self.inputs_label.setText("generated from the controls")
        self._lock_sizes(False)
        self.inputsChanged.emit()
        self._edited()

    def _lock_sizes(self, locked: bool) -> None:
        """The family and sizes are the inputs file's while one is open."""
        for path in (*SIZE_PATHS, "family"):
            self.widgets[path].setEnabled(not locked)

    def _check_inputs_match(self, problem: Problem) -> None:
        if self.inputs_arrays is not None and not set(
                problem.family.input_keys) <= set(self.inputs_arrays):
            raise SsmvizError(f"the inputs file {self.inputs_path} holds no {problem.family.name} "
                              "inputs; close it to change the family")
        wanted = problem.sizes()
        for key, value in sizes_of(problem.family, self.inputs_arrays or {}).items():
            if wanted.get(key, value) != value:
                raise SsmvizError(f"{key} is fixed by the inputs file at {value}")

    # -- view ----------------------------------------------------------------------------------
    def _update_view_ranges(self) -> None:
        s = self._valid.sizes()
        for w, top in ((self.view_batch, s["batch"]), (self.view_channel, s["d_inner"]),
                       (self.view_state, s.get("d_state", 1))):
            w.blockSignals(True)
            w.setRange(0, top - 1)
            w.blockSignals(False)

    def _view_edited(self, *_: Any) -> None:
        if not self._loading:
            self.viewChanged.emit()

    def selection(self) -> Selection:
        return Selection(self.view_batch.value(), self.view_channel.value(),
                         self.view_state.value())

    def set_selection(self, batch: int, channel: int, state: int) -> None:
        self._loading = True
        try:
            self.view_batch.setValue(batch)
            self.view_channel.setValue(channel)
            self.view_state.setValue(state)
        finally:
            self._loading = False
        self.viewChanged.emit()
