"""Messages fitted to the terminal: every line a command prints through its console wraps at spaces to the
width a terminal (or COLUMNS) sets, an indented line's continuation indented two more, and a word is never
broken, so a path or URL longer than the line stays whole (and copyable); nor is a command in backquotes,
which moves to a line of its own when it does not fit (a paste runs it as printed). Output that is not sized (a
file, CI logs) keeps one line per message, for grep (tpu_rl.scripts.cli.core.make_console decides)."""

from __future__ import annotations

import re

from rich.console import Console
from rich.text import Text

# A word, or a command in backquotes with what touches it ("(`tpu-rl runs x`;"): a command is never
# broken, so a paste runs it as printed; one that must wrap starts a line of its own and ends it. A shell's
# line continuation (" \" ending a line of a command printed over several) stays with the word before it.
_WORD = re.compile(r"[^\s`]*`[^`]*`\S*|\S+(?: \\$)?")


def fit_text(text: Text, width: int, indent: int | None = None) -> Text:
    """`text` (styles kept) with each line longer than `width` wrapped at spaces (see the module); with
    `indent`, continuation lines are indented by that many spaces instead."""
    lines = text.split("\n", allow_blank=True)
    out = Text()
    for number, line in enumerate(lines):
        if number:
            out.append("\n")
        out.append_text(_fit_line(line, width, indent))
    return out


def _fit_line(line: Text, width: int, indent_by: int | None) -> Text:
    plain = line.plain
    if len(plain) <= width:
        return line
    lead = len(plain) - len(plain.lstrip(" "))
    indent = " " * (indent_by if indent_by is not None else lead + 2 if lead else 0)
    words = [(match.start(), match.end()) for match in _WORD.finditer(plain)]
    pieces, start, end, prefix, alone = [], 0, 0, 0, False
    for first, last in words:
        if end and (alone or prefix + last - start > width):  # it does not fit on this line: break before it
            pieces.append(line[start:end])
            start, prefix = first, len(indent)
            alone = "`" in plain[first:last] and last - first > 1  # a command moved down keeps its line
        end = last
    pieces.append(line[start:end])
    fitted = Text()
    for number, piece in enumerate(pieces):
        fitted.append_text(piece if not number else Text(f"\n{indent}").append_text(piece))
    return fitted


class FittedConsole(Console):
    """A console whose print() fits each message given as a string (markup and all) to its width; a caller
    that passes soft_wrap itself (a streamed log line, a laid-out report) is printed as it asks."""

    def print(self, *objects, **options) -> None:  # rich's name
        if "soft_wrap" in options or not objects or not all(isinstance(item, str) for item in objects):
            return super().print(*objects, **options)
        sep, markup = options.pop("sep", " "), options.pop("markup", None)
        text = Text(sep).join(self.render_str(item, markup=markup, highlight=False) for item in objects)
        return super().print(fit_text(text, self.width), soft_wrap=True, **options)
