"""The linter and the type checker, as `make test` runs them first (`make lint` alone): ruff with the rules of
pyproject.toml over the product code, the tests and tools/ (not bench/), mypy over the product code, then the
count of the lines that silence one rule.

The packages are folders at the top of the checkout that install as tpu_rl.<package> (pyproject.toml's
package-dir); a tool that reads code without running it cannot follow that mapping, so layout() writes it
out as links, .cache/static/tpu_rl/<package> -> <package>, the folder [tool.mypy] mypy_path names.

What mypy still finds is written down in pyproject.toml, one line a module naming the codes left off there
(DEBT_START marks them). `--write-debt` runs mypy without them and writes them anew: after a merge, or a fix."""

from __future__ import annotations

import collections
import io
import os
import re
import subprocess
import sys
import time
import tokenize
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "tpu_rl"
LAYOUT = ROOT / ".cache" / "static"
# What ruff reads besides the product code: the same rules, no type checking.
LINTED_TOO = ("tests", "tools")
# A silencing comment names its rules (ruff's PGH004 and mypy's ignore-without-code refuse a bare one).
DEBT_START = "  # What mypy still finds, left off"
DEBT_COMMENT_LINES = 3  # the comment above the rows
DEBT_ROW = re.compile(r'^  \{ module = "[\w.]+", disable_error_code = \[[^]]*\] \},\n', re.MULTILINE)
FINDING = re.compile(r"^\.cache/static/(tpu_rl/\S+?)\.py:\d+: error: .*\[([a-z-]+)\]$", re.MULTILINE)
SILENCER = re.compile(r"#\s*(noqa|type:\s*ignore)\b(?:\[([\w\-, ]+)\]|:\s*([A-Z]+\d+(?:\s*,\s*[A-Z]+\d+)*))?")


def package_dirs() -> dict[str, str]:
    """pyproject.toml's package-dir: tpu_rl.recipes -> recipes, ..."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return project["tool"]["setuptools"]["package-dir"]


def product_folders() -> list[str]:
    return sorted(set(package_dirs().values()))


def layout() -> Path:
    """.cache/static/tpu_rl: the namespace's own files and a link to each mapped folder, as installed."""
    top = LAYOUT / NAMESPACE
    top.mkdir(parents=True, exist_ok=True)
    wanted = {path.name: path for path in (ROOT / NAMESPACE).glob("*.py")}
    wanted |= {name.removeprefix(NAMESPACE + "."): ROOT / folder for name, folder in package_dirs().items()
               if name != NAMESPACE}
    for entry in top.iterdir():
        if entry.name not in wanted or entry.resolve() != wanted[entry.name].resolve():
            entry.unlink()
    for name, target in wanted.items():
        if not (top / name).is_symlink():
            try:
                (top / name).symlink_to(os.path.relpath(target, top))
            except FileExistsError:  # another process wrote the same link just now
                pass
    return LAYOUT


def silencers(paths: list[Path]) -> collections.Counter[str]:
    """How many lines silence each rule: `noqa: BLE001`, `type: ignore[arg-type]`; a bare one counts as `all`."""
    found: collections.Counter[str] = collections.Counter()
    for path in paths:
        for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if token.type == tokenize.COMMENT:
                for kind, bracketed, coloned in SILENCER.findall(token.string):
                    tool = "noqa" if kind == "noqa" else "type: ignore"
                    rules = [rule.strip() for rule in (bracketed or coloned).split(",") if rule.strip()] or ["all"]
                    found.update(f"{tool} {rule}" for rule in rules)
    return found


def debt() -> dict[str, list[str]]:
    """pyproject.toml's modules whose mypy codes are left off, and the codes."""
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    return {row["module"]: row["disable_error_code"] for row in overrides if "disable_error_code" in row}


def write_debt() -> int:
    """Runs mypy with no module's codes left off and writes pyproject.toml's rows from what it finds."""
    bare_text = DEBT_ROW.sub("", (ROOT / "pyproject.toml").read_text())
    bare = ROOT / ".cache" / "pyproject-without-debt.toml"
    bare.write_text(bare_text)
    found = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(bare), "-p", NAMESPACE],
                           cwd=ROOT, capture_output=True, text=True).stdout
    findings = FINDING.findall(found)
    codes: dict[str, set[str]] = collections.defaultdict(set)
    for path, code in findings:
        codes[path.replace("/", ".").removesuffix(".__init__")].add(code)
    rows = []
    for module, names in sorted(codes.items()):
        listed = ", ".join(f'"{name}"' for name in sorted(names))
        rows.append(f'  {{ module = "{module}", disable_error_code = [{listed}] }},\n')
    lines = bare_text.splitlines(keepends=True)
    last = next(i for i, line in enumerate(lines) if line.startswith(DEBT_START)) + DEBT_COMMENT_LINES
    lines[last - DEBT_COMMENT_LINES] = re.sub(r"\(\d+ findings in \d+ modules",
                                              f"({len(findings)} findings in {len(codes)} modules",
                                              lines[last - DEBT_COMMENT_LINES])
    (ROOT / "pyproject.toml").write_text("".join(lines[:last] + rows + lines[last:]))
    print(f"mypy: {len(findings)} findings in {len(codes)} modules written down in pyproject.toml")
    return 0


def _run(name: str, argv: list[str]) -> int:
    started = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    print(done.stdout + done.stderr, end="")
    # mypy only notes a pyproject override that names no module it checked: a row left after its module went
    code = done.returncode or int("unused section(s)" in done.stdout + done.stderr)
    print(f"{name}: {'passed' if code == 0 else 'FAILED'} in {time.monotonic() - started:.1f} s")
    return code


def main() -> int:
    bin_dir = Path(sys.executable).parent
    layout()
    if sys.argv[1:] == ["--write-debt"]:
        return write_debt()
    folders = product_folders()
    failed = _run("ruff", [str(bin_dir / "ruff"), "check", "--quiet", *folders, *LINTED_TOO])
    failed |= _run("mypy", [str(bin_dir / "mypy"), "-p", NAMESPACE])
    for read in (folders, list(LINTED_TOO)):
        counts = silencers([path for folder in read for path in sorted((ROOT / folder).rglob("*.py"))])
        print(f"silenced lines in {', '.join(read)}: {sum(counts.values())}"
              + "".join(f"\n  {count:3d} {rule}" for rule, count in sorted(counts.items())))
    left_off = debt()
    print(f"mypy codes left off: {sum(map(len, left_off.values()))} in {len(left_off)} modules (pyproject.toml)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
