"""WGSL syntax highlighting for QTextDocument (keywords, types, attributes, numbers, comments)."""

from __future__ import annotations

import re

from PySide6.QtGui import QColor, QFont, QSyntaxHighlighter, QTextCharFormat, QTextDocument

_KEYWORDS = (
    "alias break case const const_assert continue continuing default diagnostic discard "
    "else enable fn for if let loop override requires return struct switch var while"
)
_TYPES = (
    "bool f16 f32 i32 u32 vec2 vec3 vec4 vec2f vec3f vec4f vec2u vec3u vec4u vec2i vec3i "
    "vec4i mat2x2 mat3x3 mat4x4 mat2x2f mat3x3f mat4x4f array atomic ptr sampler texture_2d "
    "function private workgroup uniform storage read write read_write"
)
_BUILTINS = (
    "abs all any arrayLength atomicAdd atomicLoad atomicStore ceil clamp cos dot exp exp2 "
    "floor fma log log2 max min mix pow select sign sin sqrt tanh workgroupBarrier "
    "storageBarrier bitcast"
)
KEYWORDS, TYPES, BUILTINS = (s.split() for s in (_KEYWORDS, _TYPES, _BUILTINS))


def _fmt(color: str, bold: bool = False, italic: bool = False) -> QTextCharFormat:
    f = QTextCharFormat()
    f.setForeground(QColor(color))
    if bold:
        f.setFontWeight(QFont.Weight.Bold)
    f.setFontItalic(italic)
    return f


class WgslHighlighter(QSyntaxHighlighter):
    """Highlights WGSL; block comments may span lines (block state 1 = inside one)."""

    def __init__(self, document: QTextDocument) -> None:
        super().__init__(document)
        words = lambda ws: r"\b(" + "|".join(map(re.escape, ws)) + r")\b"  # noqa: E731
        self.rules: list[tuple[re.Pattern[str], QTextCharFormat]] = [
            (re.compile(words(KEYWORDS)), _fmt("#0033b3", bold=True)),
            (re.compile(words(TYPES)), _fmt("#00627a")),
            (re.compile(words(BUILTINS)), _fmt("#7a3e9d")),
            (re.compile(r"@\w+"), _fmt("#9e880d")),
            (re.compile(r"\b(0x[0-9a-fA-F]+|\d+\.?\d*([eE][+-]?\d+)?)[uifh]?\b"), _fmt("#1750eb")),
        ]
        self.comment = _fmt("#8c8c8c", italic=True)

    def highlightBlock(self, text: str) -> None:  # Qt override
        for pattern, fmt in self.rules:
            for m in pattern.finditer(text):
                self.setFormat(m.start(), m.end() - m.start(), fmt)
        # Block comments (/* ... */ across lines), then line comments.
        self.setCurrentBlockState(0)
        inside = self.previousBlockState() == 1
        start = 0 if inside else text.find("/*")
        while start >= 0:
            end = text.find("*/", start if inside else start + 2)
            inside = False
            if end < 0:
                self.setCurrentBlockState(1)
                self.setFormat(start, len(text) - start, self.comment)
                break
            self.setFormat(start, end + 2 - start, self.comment)
            start = text.find("/*", end + 2)
        line = text.find("//")
        if line >= 0 and self.format(line) != self.comment:
            self.setFormat(line, len(text) - line, self.comment)
