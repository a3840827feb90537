"""The README and docs/ hold together: every relative link and anchor resolves (with GitHub's heading
slugs), and every `tpu-rl ...` command they show exists in the real click command tree with the
options it uses, no more positional arguments than it takes, and a recipe that exists.

docs/bad-input.md is generated from security/bad_input.yaml and shows commands that are wrong on
purpose (`--folow`, `--base` without a value), so its commands are not checked; its links are.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import typer

from tpu_rl.recipes import all_recipes
from tpu_rl.scripts.cli import app

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
COMMANDS_NOT_CHECKED = {REPO / "docs" / "bad-input.md"}
# Text that starts like a command but is a line the containers print (jobs/: the head's and convert's
# refusal prefix), not something to type.
NOT_COMMANDS = ("tpu-rl check failed",)
# What stands for a value in a shown command: <run>, RECIPE, … ([STEP] loses its brackets first).
PLACEHOLDER = re.compile(r"^(<[^<>]*>|[A-Z][A-Z_]*|…)$")

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
_LINK = re.compile(r"!?\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def split_code(text: str) -> tuple[str, list[str]]:
    """The page's prose (fenced blocks blanked) and the lines of its fenced code blocks."""
    prose, code, fenced = [], [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            prose.append("")
        elif fenced:
            code.append(line)
            prose.append("")
        else:
            prose.append(line)
    return "\n".join(prose), code


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text (code spans and links reduced to their text),
    lowercased, every character that is not a letter, digit, '_', '-' or space dropped, spaces as '-'."""
    text = _CODE_SPAN.sub(lambda match: match.group(2).strip(), heading)
    text = _LINK.sub(lambda match: match.group("text"), text)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor in the page; a repeated slug gets -1, -2, ... as on GitHub."""
    prose, _ = split_code(page.read_text())
    seen: dict[str, int] = {}
    found = set()
    for line in prose.splitlines():
        match = _HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    """Each relative link of the page whose file or anchor does not exist, as `target: why`."""
    prose, _ = split_code(page.read_text())
    prose = _CODE_SPAN.sub(lambda match: " " * len(match.group(0)), prose)
    problems = []
    for match in _LINK.finditer(prose):
        target = match.group("target")
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not ours to resolve
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            problems.append(f"{target}: no such file")
        elif root not in resolved.parents and resolved != root:
            problems.append(f"{target}: outside the repository")
        elif anchor and resolved.suffix != ".md":
            problems.append(f"{target}: an anchor into a file that is not Markdown")
        elif anchor and anchor not in anchors(resolved):
            problems.append(f"{target}: no heading with that anchor in {resolved.relative_to(root)}")
    return problems


def shown_commands(page: Path) -> list[str]:
    """Every `tpu-rl ...` command line of the page: from its code blocks and its code spans, one per
    shell command (split at &&, ||, |, ;), comments dropped."""
    prose, code = split_code(page.read_text())
    pieces = [line.split(" # ", 1)[0] for line in code if not line.lstrip().startswith("#")]
    pieces += [" ".join(match.group(2).split()) for match in _CODE_SPAN.finditer(prose)]
    commands = []
    for piece in pieces:
        for segment in re.split(r"&&|\|\||\||;", piece):
            segment = re.sub(r"^\s*(\$\s+)?([A-Z_]+=\S*\s+)*", "", segment).strip()
            if re.match(r"^tpu-rl\s+\S", segment) and not segment.startswith(NOT_COMMANDS):
                commands.append(segment)
    return commands


@dataclass(frozen=True)
class Leaf:
    path: str
    command: object  # a click Command (typer ships its own copy of click, so no click types here)
    options: dict[str, object]
    arguments: list[object]

    @property
    def is_group(self) -> bool:
        return hasattr(self.command, "commands")


def leaves() -> dict[str, Leaf]:
    """Every command of the real app by its words (`run`, `secret set`), with its option names
    (including the help option each context gives it) and its positional arguments."""
    root = typer.main.get_command(app)
    found: dict[str, Leaf] = {}

    def walk(command, words: list[str], parent) -> None:
        ctx = command.context_class(command, parent=parent, info_name=words[-1] if words else "tpu-rl",
                                    **command.context_settings)
        params = command.get_params(ctx)  # with the help option this context gives it (-h, --help)
        options = {name: param for param in params if param.param_type_name == "option"
                   for name in (*param.opts, *param.secondary_opts)}
        arguments = [param for param in params if param.param_type_name == "argument"]
        found[" ".join(words)] = Leaf(" ".join(words), command, options, arguments)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*words, name], ctx)

    walk(root, [], None)
    return found


def command_problems(line: str, tree: dict[str, Leaf]) -> list[str]:
    """What is wrong with one shown command: an unknown command, an option the command does not have,
    more positional arguments than it takes, or a recipe that does not exist."""
    spaced = re.sub(r"<[^<>\s][^<>]*>", lambda match: match.group(0).replace(" ", "_"), line)  # <first run>
    try:
        tokens = shlex.split(spaced)
    except ValueError:
        tokens = spaced.split()
    words: list[str] = []
    rest = tokens[1:]
    while rest and " ".join([*words, rest[0]]) in tree and not rest[0].startswith("-"):
        words.append(rest.pop(0))
    leaf = tree[" ".join(words)]
    if leaf.is_group and rest and not rest[0].startswith("-"):
        if not PLACEHOLDER.match(rest[0].strip("[]")):
            return [f"{line}: no command `{' '.join(['tpu-rl', *words, rest[0]])}`"]
        # `tpu-rl COMMAND -h`: what follows must hold for every command
        rest.pop(0)
        candidates = [candidate for key, candidate in tree.items() if key and not candidate.is_group]
        return [problem for candidate in candidates for problem in _check_arguments(line, candidate, rest, placeholder=True)]
    return _check_arguments(line, leaf, rest, placeholder=False)


def _check_arguments(line: str, leaf: Leaf, tokens: list[str], *, placeholder: bool) -> list[str]:
    problems, positional = [], []
    tokens = list(tokens)
    while tokens:
        token = tokens.pop(0)
        if token in ("<", ">", ">>") or token.startswith(("2>", ">")):
            break  # a redirection: the command ends here
        token = token.strip("[]")
        if token.startswith("-") and token != "-" and not re.match(r"^-\d", token):
            name, has_value, _ = token.partition("=")
            option = leaf.options.get(name)
            if option is None:
                problems.append(f"{line}: `tpu-rl {leaf.path}` has no option {name}")
            elif not option.is_flag and not option.count and not has_value and tokens:
                tokens.pop(0)  # its value
        else:
            positional.append(token)
    if placeholder:
        return problems
    if len(positional) > len(leaf.arguments):
        problems.append(f"{line}: `tpu-rl {leaf.path}` takes {len(leaf.arguments)} positional argument(s), "
                        f"the line gives {positional}")
    for argument, value in zip(leaf.arguments, positional):
        if argument.name == "recipe_name" and not PLACEHOLDER.match(value) and value not in all_recipes():
            problems.append(f"{line}: no recipe {value!r}")
    return problems


# -- the checks on this repository -------------------------------------------------------------------

def test_every_relative_link_and_anchor_in_the_readme_and_docs_resolves():
    problems = [f"{page.relative_to(REPO)}: {problem}" for page in PAGES for problem in broken_links(page)]
    assert problems == []


def test_every_tpu_rl_command_the_readme_and_docs_show_exists_with_its_options():
    tree = leaves()
    shown = {page: shown_commands(page) for page in PAGES if page not in COMMANDS_NOT_CHECKED}
    assert len(shown[REPO / "README.md"]) >= 10, "the README shows the commands of the path to a model"
    problems = [f"{page.relative_to(REPO)}: {problem}" for page, lines in shown.items()
                for line in lines for problem in command_problems(line, tree)]
    assert problems == []


def test_the_readme_shows_the_two_commands_and_the_path_to_a_compared_second_run():
    readme = (REPO / "README.md").read_text()
    assert "make synth" in readme and "make test" in readme
    shown = shown_commands(REPO / "README.md")
    for command in ("tpu-rl secret set", "tpu-rl preflight", "tpu-rl run", "tpu-rl metrics", "tpu-rl runs"):
        assert any(line.startswith(command + " ") for line in shown), command
    assert any("--set" in line for line in shown if line.startswith("tpu-rl run "))
    assert len(readme.splitlines()) <= 200


# -- the checker itself, on pages made for it ----------------------------------------------------------

def test_github_slugs_follow_githubs_rules():
    # Expected anchors written by hand from GitHub's rules (lowercase; punctuation other than '-' and
    # '_' dropped; each space one '-'; code spans keep their text).
    assert github_slug("Runs, --set, comparing runs") == "runs---set-comparing-runs"
    assert github_slug("CI, forks and vendored data") == "ci-forks-and-vendored-data"
    assert github_slug("What `tpu-rl run` prints") == "what-tpu-rl-run-prints"
    assert github_slug("Where the train JobSet differs from xpk") == "where-the-train-jobset-differs-from-xpk"
    assert github_slug("TPU_RL_CONFIG: the file") == "tpu_rl_config-the-file"


def test_a_missing_page_a_missing_anchor_and_a_repeated_heading_are_told_apart(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## Notes\n\n## Notes\n\n```\n## Not a heading\n```\n")
    page = tmp_path / "README.md"
    page.write_text(
        "# Title\n\n"
        "[fine](docs/other.md#notes) [second](docs/other.md#notes-1) [self](#title)\n"
        "[gone](docs/gone.md) [no anchor](docs/other.md#nowhere) [in code](docs/other.md#not-a-heading)\n"
        "`[ignored](docs/absent.md)` [web](https://example.com/x#y)\n"
    )
    assert broken_links(page, root=tmp_path) == [
        "docs/gone.md: no such file",
        "docs/other.md#nowhere: no heading with that anchor in docs/other.md",
        "docs/other.md#not-a-heading: no heading with that anchor in docs/other.md",
    ]


def test_an_unknown_command_option_recipe_or_extra_argument_is_reported(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\n"
        "tpu-rl run qwen3-v6e32 --dry-run          # fine\n"
        "tpu-rl train qwen3-v6e32\n"
        "tpu-rl logs qwen3-v6e32 train --folow\n"
        "tpu-rl secret set < ~/.hf-token\n"
        "tpu-rl secret get\n"
        "```\n"
        "Then `tpu-rl status qwen3 --json`, `tpu-rl runs qwen3-v6e32 extra`, `tpu-rl COMMAND -h` and\n"
        "`source .venv/bin/activate && tpu-rl metrics RECIPE --run A --run B --png x.png`;\n"
        "`tpu-rl check failed: …` is a log line.\n"
    )
    shown = shown_commands(page)
    assert shown == [
        "tpu-rl run qwen3-v6e32 --dry-run",
        "tpu-rl train qwen3-v6e32",
        "tpu-rl logs qwen3-v6e32 train --folow",
        "tpu-rl secret set < ~/.hf-token",
        "tpu-rl secret get",
        "tpu-rl status qwen3 --json",
        "tpu-rl runs qwen3-v6e32 extra",
        "tpu-rl COMMAND -h",
        "tpu-rl metrics RECIPE --run A --run B --png x.png",
    ]
    tree = leaves()
    assert [problem for line in shown for problem in command_problems(line, tree)] == [
        "tpu-rl train qwen3-v6e32: no command `tpu-rl train`",
        "tpu-rl logs qwen3-v6e32 train --folow: `tpu-rl logs` has no option --folow",
        "tpu-rl secret get: no command `tpu-rl secret get`",
        "tpu-rl status qwen3 --json: no recipe 'qwen3'",
        "tpu-rl runs qwen3-v6e32 extra: `tpu-rl runs` takes 1 positional argument(s), the line gives "
        "['qwen3-v6e32', 'extra']",
    ]


# -- the docs agree with the code and the workflow -------------------------------------------------------

def test_the_readme_asks_for_the_python_and_node_that_pyproject_and_the_workflow_use():
    import tomllib

    import yaml

    readme = (REPO / "README.md").read_text()
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "plan.yml").read_text())
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert f"| Python ≥ {requires.removeprefix('>=')} |" in readme
    assert f"| Node.js {workflow['env']['NODE_VERSION']} LTS |" in readme
    setup_node = [step for job in workflow["jobs"].values() for step in job["steps"]
                  if str(step.get("uses", "")).startswith("actions/setup-node@")]
    assert setup_node and all(step["with"]["node-version"] == "${{ env.NODE_VERSION }}" for step in setup_node)
    review = " ".join((REPO / "docs" / "plan-review.md").read_text().split())
    assert f"Python {workflow['env']['PYTHON_VERSION']}, Node {workflow['env']['NODE_VERSION']} and" in review


def test_the_token_is_stored_one_way_and_the_pages_show_only_that_way():
    pages = {page.relative_to(REPO): page.read_text() for page in PAGES}
    assert [name for name, text in pages.items() if "gcloud secrets versions add" in text] == []
    assert "tpu-rl secret set < ~/.hf-token" in pages[Path("README.md")]


def test_the_settings_page_says_environment_and_file_are_merged_key_by_key():
    # the behaviour: tests/test_settings.py::test_config_file_is_read_and_the_environment_wins
    page = (REPO / "docs" / "settings.md").read_text()
    assert "merged key by key" in page
    assert "else from `tpu-rl.toml`" not in page


def named_page_problems(text: str, root: Path = REPO) -> list[str]:
    """Each `docs/<page>.md` or `docs/<page>.md#<anchor>` the text names whose page or heading is missing."""
    problems = []
    for page, anchor in re.findall(r"\b(docs/[\w-]+\.md)\b(?:#([\w-]+))?", text):
        if not (root / page).is_file():
            problems.append(f"{page} does not exist")
        elif anchor and anchor not in anchors(root / page):
            problems.append(f"{page} has no heading with the anchor #{anchor}")
    return problems


def test_every_page_a_message_or_docstring_points_to_exists():
    """Messages name the page to read (`see docs/settings.md`), comments the section (`docs/provenance.md#x`);
    each page and anchor must exist, and a README section they name must be one."""
    readme_headings = {match.group(2) for line in (REPO / "README.md").read_text().splitlines()
                       if (match := _HEADING.match(line))}
    problems = []
    for package in ("recipes", "jobs", "infra", "stacks", "scripts"):
        for source in sorted((REPO / package).rglob("*.py")):
            text = source.read_text()
            problems += [f"{source.relative_to(REPO)}: {problem}" for problem in named_page_problems(text)]
            for section in re.findall(r"README[ :]+['\"]([^'\"]+)['\"]|README: ([A-Z][\w ]+)", text):
                name = next(part for part in section if part)
                if name not in readme_headings:
                    problems.append(f"{source.relative_to(REPO)}: the README has no section {name!r}")
    assert problems == []


def test_a_named_page_or_section_that_does_not_exist_is_reported(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "provenance.md").write_text("# Provenance\n\n## Kueue webhook readiness\n")
    text = ("# why: ... (docs/provenance.md#kueue-webhook-readiness)\n"
            "# (docs/provenance.md#kueue-webhook) see docs/gone.md and docs/provenance.md.\n")
    assert named_page_problems(text, root=tmp_path) == [
        "docs/provenance.md has no heading with the anchor #kueue-webhook", "docs/gone.md does not exist"]


def test_every_tpu_rl_environment_knob_the_code_reads_is_in_the_settings_table():
    """TPU_RL_LOGGING_ENDPOINT was read by the code and missing from docs/settings.md's knobs table."""
    knobs = set()
    for package in ("recipes", "jobs", "infra", "stacks", "scripts"):
        for source in (REPO / package).rglob("*.py"):
            knobs.update(re.findall(r"\bTPU_RL_[A-Z][A-Z_]*[A-Z]\b", source.read_text()))
    table = "\n".join(line for line in (REPO / "docs" / "settings.md").read_text().splitlines()
                      if line.startswith("| `"))
    assert "TPU_RL_LOGGING_ENDPOINT" in knobs
    assert sorted(knob for knob in knobs if f"`{knob}`" not in table) == []


def test_the_pages_state_the_maintenance_grace_the_code_uses():
    """docs/settings.md said 1200 while `run` waited 3600 (issue 25, section 4): both pages that name the knob
    state the one default, the tuning setting's (recipes/settings/tuning.py)."""
    from tpu_rl.recipes.settings.tuning import MAINTENANCE_GRACE

    default = f"default {MAINTENANCE_GRACE.default:g}"
    settings_row = next(line for line in (REPO / "docs" / "settings.md").read_text().splitlines()
                        if line.startswith("| `TPU_RL_MAINTENANCE_GRACE_SECONDS` |"))
    pipeline = " ".join((REPO / "docs" / "pipeline.md").read_text().split())
    assert re.findall(r"default \d+", settings_row) == [default]
    assert re.findall(r"`TPU_RL_MAINTENANCE_GRACE_SECONDS` \((default \d+)\)", pipeline) == [default]
