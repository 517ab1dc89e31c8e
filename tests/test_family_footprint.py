"""A family is one folder: outside ``core/families/mamba3/`` the code names Mamba-3 only in
its one registry line (and in the app's Mamba-3-only teaching views, which are Qt and so
cannot live in the Qt-free core). Comments and docstrings may mention it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ssmviz"
NAME = "mamba3"
#: The family's own folder, and the app's views of it (Qt: they cannot live in the core).
OWN = ("core/families/mamba3/",)
QT_VIEWS = ("app/teaching/complex_state.py", "app/teaching/rules.py",
            "app/teaching/versus.py")
#: The one line that registers the built-in family.
REGISTRY = ("core/families/__init__.py", '"mamba3",')


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are documentation: docstrings and other bare
    string statements."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)}


def code_mentions(text: str, name: str = NAME) -> list[int]:
    """Line numbers where ``name`` (any case) is code: an identifier, an attribute, an
    imported module or a string that is not documentation. Comments do not count."""
    tree = ast.parse(text)
    docs = _docstrings(tree)
    pattern = re.compile(re.escape(name), re.IGNORECASE)
    lines = set()
    for node in ast.walk(tree):
        words: list[str] = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docs:
            words.append(node.value)
        elif isinstance(node, ast.Name):
            words.append(node.id)
        elif isinstance(node, ast.Attribute):
            words.append(node.attr)
        elif isinstance(node, ast.alias):
            words += [node.name, node.asname or ""]
        elif isinstance(node, ast.ImportFrom):
            words.append(node.module or "")
        elif isinstance(node, ast.arg | ast.FunctionDef | ast.ClassDef | ast.keyword):
            words.append(getattr(node, "arg", None) or getattr(node, "name", None) or "")
        if any(pattern.search(w) for w in words):
            lines.add(node.lineno)
    return sorted(lines)


def test_the_checker_sees_code_and_ignores_words() -> None:
    text = '''"""Mamba3 in a docstring."""
x = 1  # mamba3 in a comment
if family == "mamba3":
    from ssmviz.core.families.mamba3 import rules
y = f"{name} is not Mamba3"
def f(mamba3_rank): ...
'''
    assert code_mentions(text) == [3, 4, 5, 6]


def test_mamba3_is_one_folder_and_one_registry_line() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if "node_modules" in rel or rel.startswith(OWN) or rel in QT_VIEWS:
            continue
        text = path.read_text(encoding="utf-8")
        for line in code_mentions(text):
            found.append((rel, text.splitlines()[line - 1].strip()))
    assert found == [REGISTRY], found
