"""Comments in the product code say why in a line or two, with one source; the long provenance lives in
docs/provenance.md, one section per fact, which the comment names (docs/development.md). Two checks hold
that: no run of more than 5 comment lines, and no upstream line number (`L123`, `line 123`,
`file.py:123`, `file.go 123`) in a comment or docstring, because upstream line numbers move with every
commit; a citation names the function, class or symbol instead. An absl log prefix (`train_rl.py:785] `)
is a log line's format, not a citation, and is left alone. The bash files of the packages (the VM startup
script's parts) are held to the same two checks."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("recipes", "infra", "stacks", "jobs", "scripts")
MAX_COMMENT_RUN = 5
_FILE = r"\b[\w./-]+\.(?:py|go|sh|ya?ml|tf|tpl|j2|c|cc|h|md|txt|toml|json|proto|ts|rs)"
LINE_CITATION = re.compile(
    r"\bL\d+\b"                          # L123, L12-34
    r"|\blines? \d+"                     # line 123, lines 12-34
    rf"|{_FILE}(?::|#L)\d+(?!\d*\] )"    # main.tf:101, x.py#L12 (not absl's `file.py:785] ` prefix)
    rf"|{_FILE} \d+(?:-\d+)?\b(?! ?(?:s|ms|bytes|MiB|GiB|%)\b)"  # workload.go 1506-1530
)


def sources() -> list[Path]:
    return [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]


def shell_sources() -> list[Path]:
    return [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.sh"))]


def shell_comments(text: str) -> list[tuple[int, str]]:
    """(line, text) of every bash line that holds only a comment."""
    return [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.lstrip().startswith("#")]


def shell_comment_runs(text: str) -> list[tuple[int, int]]:
    """(first line, length) of every run of more than MAX_COMMENT_RUN bash lines that hold only a comment."""
    numbers = [number for number, _ in shell_comments(text)]
    runs, start, length = [], 0, 0
    for number in [*numbers, -1]:
        if length and number == start + length:
            length += 1
            continue
        if length > MAX_COMMENT_RUN:
            runs.append((start, length))
        start, length = number, 1
    return runs


def long_comment_runs(text: str) -> list[tuple[int, int]]:
    """(first line, length) of every run of more than MAX_COMMENT_RUN lines that hold only a comment."""
    lines = text.splitlines()
    comment_lines = {token.start[0] for token in tokenize.generate_tokens(io.StringIO(text).readline)
                     if token.type == tokenize.COMMENT and lines[token.start[0] - 1].lstrip().startswith("#")}
    runs, start, length = [], 0, 0
    for number in range(1, len(lines) + 2):
        if number in comment_lines:
            start, length = (start, length + 1) if length else (number, 1)
            continue
        if length > MAX_COMMENT_RUN:
            runs.append((start, length))
        length = 0
    return runs


def prose(text: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and every docstring line of a module."""
    found = [(token.start[0], token.string) for token in tokenize.generate_tokens(io.StringIO(text).readline)
             if token.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                found += [(first.lineno + offset, line)
                          for offset, line in enumerate(ast.get_source_segment(text, first).splitlines())]
    return sorted(found)


def line_citations(text: str) -> list[tuple[int, str]]:
    return [(number, match.group(0)) for number, line in prose(text) for match in LINE_CITATION.finditer(line)]


def test_no_comment_runs_longer_than_five_lines():
    walls = [f"{path.relative_to(ROOT)}:{start}: {length} comment lines"
             for path in sources() for start, length in long_comment_runs(path.read_text())]
    walls += [f"{path.relative_to(ROOT)}:{start}: {length} comment lines"
              for path in shell_sources() for start, length in shell_comment_runs(path.read_text())]
    assert walls == [], ("say why in a line or two with one source; move the rest to a section of "
                         f"docs/provenance.md and name it: {walls}")


def test_no_upstream_line_number_in_a_comment_or_docstring():
    cited = [f"{path.relative_to(ROOT)}:{number}: {citation!r}"
             for path in sources() for number, citation in line_citations(path.read_text())]
    cited += [f"{path.relative_to(ROOT)}:{number}: {match.group(0)!r}" for path in shell_sources()
              for number, line in shell_comments(path.read_text()) for match in LINE_CITATION.finditer(line)]
    assert cited == [], f"name the function, class or symbol instead of the line: {cited}"



# Packages whose docstring maps their modules, one `- name.py:` (or `name/:`) item each.
MAPPED_PACKAGES = ("scripts/pipeline", "scripts/pipeline/gke", "scripts/pipeline/vm")
# recipes/ and each of its concept packages: a reader finds a change's file from the tree and these maps
MAPPED_PACKAGES += tuple(str(init.parent.relative_to(ROOT)) for init in sorted((ROOT / "recipes").rglob("__init__.py")))


def unmapped(package: Path) -> list[str]:
    """The modules and subpackages of `package` its docstring's map does not name."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    named = set(re.findall(r"\b([\w]+\.py|[\w]+/)", doc))
    parts = [path.name for path in package.glob("*.py") if path.name != "__init__.py"]
    parts += [f"{path.name}/" for path in package.iterdir() if (path / "__init__.py").is_file()]
    return sorted(part for part in parts if part not in named)


def test_a_package_map_names_every_module_of_its_package():
    missing = {package: names for package in MAPPED_PACKAGES if (names := unmapped(ROOT / package))}
    assert missing == {}, f"add a line for each to the package's docstring: {missing}"

# -- the checks themselves, on text made for them ---------------------------------------------------------

def test_a_run_of_six_comment_lines_is_found_and_five_or_a_shell_script_in_a_string_are_not():
    five = "x = 1\n" + "# why\n" * 5 + "y = 2\n"
    six = "x = 1\n" + "# why\n" * 6 + "y = 2\n    # trailing\n"
    in_string = 'SCRIPT = """\n' + "# a shell comment\n" * 8 + '"""\n'
    assert long_comment_runs(five) == []
    assert long_comment_runs(six) == [(2, 6)]
    assert long_comment_runs(in_string) == []
    shell = "x=1\n" + "# why\n" * 5 + "y=2\n" + "  # why\n" * 6 + "z=3\n"
    assert shell_comment_runs(shell) == [(8, 6)]


def test_line_numbers_are_found_in_comments_and_docstrings_and_not_elsewhere():
    text = ('"""Module: utils_rl.py L535-583 and main.tf:101-150."""\n'
            "# pkg/workload/workload.go 1506-1530 and line 98; see get_optimizer in utils_rl.py\n"
            "def f():\n"
            '    """hooks.py:98 and the prefix `train_rl.py:785] `; 2 of 3 files, after 60 s."""\n'
            '    return "L123 line 4 a.py:5"\n')
    assert [citation for _, citation in line_citations(text)] == [
        "L535", "main.tf:101", "pkg/workload/workload.go 1506-1530", "line 98", "hooks.py:98"]


def test_a_module_left_out_of_a_package_map_is_found(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "__init__.py").write_text("")
    for name in ("a.py", "big.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "__init__.py").write_text('"""The map.\n\n- a.py: one.\n"""\n')
    assert unmapped(tmp_path) == ["big.py", "sub/"]
