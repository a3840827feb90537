"""The one home of the tests' Terraform runs: the CLI, its environment, and the synthesized stacks made
loadable without a provider.

No provider can be downloaded here, but Terraform's own parser and evaluator can run. `provider_free`
rewrites a cdk.tf.json so that every resource, data source and provider block becomes the built-in
`terraform_data` whose `input` is its body: each string is then parsed as the template Terraform reads,
each reference is resolved, each function is called and each precondition and postcondition is
evaluated by Terraform itself. What a provider would compute (an id, an endpoint, a data source's answer)
is left unknown, as a plan of a new stack leaves it, once the provider's bindings say it has that attribute
(tests/provider_attributes.py; docs/development.md, "Terraform in the tests").
"""

from __future__ import annotations

import bisect
import functools
import json
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import provider_attributes
import pytest

# The oldest Terraform the stacks load in, as `make install` checks it (the Makefile's TERRAFORM_MIN).
MIN_VERSION = tuple(int(part) for part in re.search(
    r"^TERRAFORM_MIN := (\d+)\.(\d+)$", (Path(__file__).parents[1] / "Makefile").read_text(), re.MULTILINE).groups())
MIN_TEXT = ".".join(map(str, MIN_VERSION))
INSTALL_HINT = f"install Terraform >= {MIN_TEXT} (https://developer.hashicorp.com/terraform/install)"
CONFIG_FILE = "main.tf.json"
PLAN_FILE = "tpu-rl.tfplan"
# Keys of a resource or data source body that are Terraform's meta-arguments, not provider attributes.
META_ARGUMENTS = {"//", "count", "for_each", "provider", "depends_on", "lifecycle", "provisioner", "connection"}
# An attribute traversal after a block's address: .name, [0], ["key"].
_STEP = r'\.[\w-]+|\[\d+\]|\["[^"]*"\]'
_TRAVERSAL = rf"(?:{_STEP})*"
_VERSION = re.compile(r"Terraform v(\d+)\.(\d+)\.(\d+)")


def terraform() -> str:
    """The terraform CLI (>= the minimum); fails the test, naming it, when it is missing or older: never a
    skip, here or under CI."""
    found, problem = _locate(os.environ.get("PATH", ""))
    if problem:
        pytest.fail(problem, pytrace=False)
    return found


@functools.cache  # once per PATH: every run of the suite asks many times
def _locate(search_path: str) -> tuple[str, str]:
    """(the CLI's path, "") or ("", what is wrong and how to fix it)."""
    found = shutil.which("terraform", path=search_path)
    if found is None:
        return "", f"the terraform CLI is not on PATH: {INSTALL_HINT}"
    shown = subprocess.run([found, "version"], capture_output=True, text=True, env=terraform_env(None))
    version = _VERSION.search(shown.stdout)
    if version is None or tuple(map(int, version.groups()[:2])) < MIN_VERSION:
        said = shown.stdout.strip().splitlines()[0] if shown.stdout.strip() else shown.stderr.strip()
        return "", f"{found} is not Terraform >= {MIN_TEXT} ({said}): {INSTALL_HINT}"
    return found, ""


def terraform_env(home: Path | None, **extra: str) -> dict[str, str]:
    """No update check, no prompts, no user CLI configuration, and (with `home`) nothing written outside it."""
    env = {**os.environ, "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1", "TF_CLI_CONFIG_FILE": os.devnull}
    if home is not None:
        env |= {"HOME": str(home), "TF_DATA_DIR": str(home / ".terraform-data")}
    return env | extra


def offline_env(home: Path) -> dict[str, str]:
    """terraform_env whose CLI configuration installs providers only from an empty directory: a
    configuration that needed any provider would fail `init` at once instead of reaching a registry."""
    mirror = home / "no-providers"
    mirror.mkdir(parents=True, exist_ok=True)
    config = home / "offline.tfrc"
    config.write_text(f'provider_installation {{\n  filesystem_mirror {{\n    path = "{mirror}"\n  }}\n}}\n')
    return terraform_env(home, TF_CLI_CONFIG_FILE=str(config))


def terraform_outputs(directory: Path, outputs: dict[str, str]) -> dict[str, Any]:
    """Plan a provider-free configuration whose outputs are the given expressions; their planned values."""
    config = {"output": {name: {"value": expression} for name, expression in outputs.items()}}
    (directory / CONFIG_FILE).write_text(json.dumps(config))
    env = offline_env(directory)
    for command in (["init", "-input=false"], ["plan", "-input=false", f"-out={PLAN_FILE}"]):
        subprocess.run([terraform(), *command], cwd=directory, env=env, check=True, capture_output=True)
    return {name: change["after"] for name, change in planned(directory, env)["output_changes"].items()}


def planned(directory: Path, env: Mapping[str, str]) -> dict:
    """`terraform show -json` of the saved plan in `directory`."""
    shown = subprocess.run([terraform(), "show", "-json", PLAN_FILE], cwd=directory, env=dict(env), check=True,
                           capture_output=True, text=True)
    return json.loads(shown.stdout)


# --- A synthesized stack, provider-free ---------------------------------------------------------------------

def data_name(address: str) -> str:
    """`google_x.name` -> `google_x__name`; `data.google_x.name` -> `data__google_x__name`."""
    return address.replace(".", "__")


@dataclass
class _References:
    """Rewrites the references of a stack's expressions to the terraform_data standing in for each block, and
    collects each reference to an attribute the block's type does not have (tests/provider_attributes.py)."""
    bodies: dict[str, dict]  # original address -> its body (the attributes a reference may read)

    def __post_init__(self) -> None:
        names = "|".join(re.escape(address) for address in sorted(self.bodies, key=len, reverse=True))
        self.pattern = re.compile(rf"(?<![\w.-])({names})(?![\w-])({_TRAVERSAL})") if names else None
        self.errors: list[str] = []

    def _one(self, match: re.Match, where: str) -> str:
        address, traversal = match.group(1), match.group(2)
        stand_in = f"terraform_data.{data_name(address)}"
        if not traversal:
            return stand_in  # the whole object: depends_on, replace_triggered_by
        self._check(address, traversal, where)
        return self.attribute(stand_in, traversal, self.bodies[address])

    def _check(self, address: str, traversal: str, where: str, shown: str = "") -> None:
        """Record `where: reference: ...` when the first attribute step is not an attribute of the type."""
        first = next((step[1:] for step in re.findall(_STEP, traversal) if step.startswith(".")), None)
        kind, type_name = ("data", address.split(".")[1]) if address.startswith("data.") else \
            ("resource", address.split(".")[0])
        try:
            bindings, names = provider_attributes.attributes(kind, type_name)
        except provider_attributes.NoBindings as missing:
            self.errors.append(f"{where}: {shown or address}{traversal}: {missing}")
            return
        if first is not None and first not in names:
            self.errors.append(f"{where}: {shown or address}{traversal}: {type_name} has no attribute {first!r} "
                               f"(the provider's bindings: {bindings})")

    @staticmethod
    def attribute(stand_in: str, traversal: str, body: dict) -> str:
        """The stand-in's expression for `<block><traversal>`, e.g. traversal `.master_auth[0].x`."""
        if traversal == ".id":
            return f"{stand_in}.id"
        steps, value, path = re.findall(_STEP, traversal), body, ""
        for step in steps:
            if step == "[0]" and isinstance(value, dict):
                continue  # cdktf writes a single nested block as an object, Terraform reads it as a list
            key = step[1:] if step.startswith(".") else json.loads(step[1:-1]) if step.startswith('["') else None
            if isinstance(value, dict) and key in value:
                value, path = value[key], path + step
            elif isinstance(value, list) and key is None and int(step[1:-1]) < len(value):
                value, path = value[int(step[1:-1])], path + step
            else:
                # Computed by the provider (_check refused a name the provider does not have): unknown at plan,
                # of any type, as a new stack's plan sees it (the type of jsondecode of an unknown string is
                # dynamic: zclconf/go-cty@1dfd594c cty/function/stdlib/json.go, JSONDecodeFunc).
                return f"jsondecode({stand_in}.id){traversal}"
        return f"{stand_in}.input{path}"  # set in the configuration: known at plan, as the provider plans it

    def rewrite(self, value: Any, where: str, body: dict | None = None, block: str = "") -> Any:
        """Every string of `value` (at `where`, e.g. `google_x.y: a.b`) with its references rewritten; `self.`
        too when `body` is that of `block`, the block's own address."""
        if isinstance(value, dict):
            return {key: self.rewrite(item, _inside(where, key), body, block) for key, item in value.items()}
        if isinstance(value, list):
            return [self.rewrite(item, f"{where}[{index}]", body, block) for index, item in enumerate(value)]
        if not isinstance(value, str):
            return value
        text = self.pattern.sub(lambda match: self._one(match, where), value) if self.pattern else value
        if body is not None:
            def own(match: re.Match) -> str:
                self._check(block, match.group(1), where, shown="self")
                return self.attribute("self", match.group(1), body)
            text = re.sub(rf"(?<![\w.-])self((?:{_STEP})+)", own, text)
        return text


def _inside(where: str, key: str) -> str:
    """`google_x.y` + `a` -> `google_x.y: a`; `google_x.y: a` + `b` -> `google_x.y: a.b`."""
    return f"{where}.{key}" if ": " in where else f"{where}: {key}"


def _lifecycle(lifecycle: dict, references: _References, body: dict, address: str) -> dict:
    rewritten = dict(lifecycle)
    for kind in ("precondition", "postcondition"):
        if kind in lifecycle:
            rewritten[kind] = references.rewrite(lifecycle[kind], f"{address}: lifecycle.{kind}",
                                                 body if kind == "postcondition" else None, address)
    if "replace_triggered_by" in lifecycle:
        rewritten["replace_triggered_by"] = references.rewrite(lifecycle["replace_triggered_by"],
                                                               f"{address}: lifecycle.replace_triggered_by")
    if isinstance(lifecycle.get("ignore_changes"), list):  # the attributes live under `input` now
        rewritten["ignore_changes"] = [f"input.{path}" for path in lifecycle["ignore_changes"]]
    return rewritten


def _stand_in(address: str, body: dict, references: _References) -> dict:
    attributes = {key: value for key, value in body.items() if key not in META_ARGUMENTS}
    block: dict[str, Any] = {"input": references.rewrite(attributes, address)}
    for key in ("count", "for_each", "depends_on"):
        if key in body:
            block[key] = references.rewrite(body[key], f"{address}: {key}")
    if "lifecycle" in body:
        block["lifecycle"] = _lifecycle(body["lifecycle"], references, attributes, address)
    return block


class UnknownAttributes(ValueError):
    """References to attributes their block's type does not have (each: where, the reference, why)."""


def provider_free(stack: Mapping[str, Any]) -> dict:
    """A copy of a synthesized stack that Terraform loads with no provider: every resource, data source
    and provider block a `terraform_data` named after it (`google_x.y` -> `terraform_data.google_x__y`),
    with its body as `input` and its references rewritten (`google_x.y.a` -> `...google_x__y.input.a`,
    or an unknown when the provider computes `a`); no backend, no required providers. A reference to an
    attribute the provider's bindings do not have raises UnknownAttributes."""
    config, errors = _provider_free(stack)
    if errors:
        raise UnknownAttributes("\n".join(errors))
    return config


def _provider_free(stack: Mapping[str, Any]) -> tuple[dict, list[str]]:
    unknown = set(stack) - {"//", "terraform", "provider", "resource", "data", "locals", "output", "variable"}
    if unknown:
        raise ValueError(f"provider_free does not know the top-level blocks {sorted(unknown)}: teach it them")
    blocks: dict[str, dict] = {}
    for kind, prefix in (("resource", ""), ("data", "data.")):
        for type_name, by_name in stack.get(kind, {}).items():
            for name, body in by_name.items():
                blocks[f"{prefix}{type_name}.{name}"] = body
    references = _References({address: {k: v for k, v in body.items() if k not in META_ARGUMENTS}
                              for address, body in blocks.items()})
    stand_ins = {data_name(address): _stand_in(address, body, references) for address, body in blocks.items()}
    for type_name, configurations in stack.get("provider", {}).items():
        for index, body in enumerate(configurations):
            attributes = {key: value for key, value in body.items() if key != "alias"}
            stand_ins[f"provider__{type_name}__{index}"] = {
                "input": references.rewrite(attributes, f"provider.{type_name}[{index}]")}
    config: dict[str, Any] = {}
    settings = {key: value for key, value in stack.get("terraform", {}).items()
                if key not in ("backend", "required_providers", "cloud")}
    if settings:
        config["terraform"] = settings
    if stand_ins:
        config["resource"] = {"terraform_data": stand_ins}
    for kind in ("locals", "output", "variable"):
        if kind in stack:
            config[kind] = {name: references.rewrite(value, f"{kind}.{name}") for name, value in stack[kind].items()}
    return config, references.errors


def dumps_with_paths(value: Any) -> tuple[str, list[tuple[int, str]]]:
    """Indented JSON, and (byte offset, path) of each value in it, to name what an error points at.

    By byte, not line: Terraform counts the lines of a string template from its decoded text, so a
    newline inside a string moves the lines it reports, while a value's decoded bytes never reach past
    its JSON text (ASCII JSON: a character is a byte)."""
    parts: list[str] = []
    offsets: list[tuple[int, str]] = []
    size = 0

    def write(text: str) -> None:
        nonlocal size
        parts.append(text)
        size += len(text)

    def emit(item: Any, path: str, depth: int) -> None:
        offsets.append((size, path))
        if isinstance(item, dict) and item:
            write("{")
            for position, (key, child) in enumerate(item.items()):
                write(("," if position else "") + "\n" + " " * (depth + 1) + json.dumps(key) + ": ")
                emit(child, f"{path}.{key}".lstrip("."), depth + 1)
            write("\n" + " " * depth + "}")
        elif isinstance(item, list) and item:
            write("[")
            for position, child in enumerate(item):
                write(("," if position else "") + "\n" + " " * (depth + 1))
                emit(child, f"{path}[{position}]", depth + 1)
            write("\n" + " " * depth + "]")
        else:
            write(json.dumps(item))
    emit(value, "", 0)
    return "".join(parts) + "\n", offsets


def _path_at(offsets: list[tuple[int, str]], byte: int) -> str:
    """The innermost value whose JSON text starts at or before `byte`."""
    index = bisect.bisect_right(offsets, (byte, "\uffff")) - 1
    return offsets[index][1] if index >= 0 else ""


def _where(path: str) -> str:
    """`resource.terraform_data.google_x__y.input.a.b` -> `google_x.y: a.b` (the stack's own names)."""
    match = re.match(r"resource\.terraform_data\.([^.\[]+)(?:\.input)?\.?(.*)", path)
    if not match:
        return path
    return f"{match.group(1).replace('__', '.')}: {match.group(2) or '(block)'}"


@dataclass(frozen=True)
class StackRun:
    """What Terraform said of one stack: the errors of `validate` (each naming the block and attribute),
    and of `plan` when validate passed (None: not planned)."""
    stack: str
    directory: Path
    validate_errors: list[str]
    plan_errors: list[str] | None
    env: dict[str, str]

    @property
    def errors(self) -> list[str]:
        return self.validate_errors + (self.plan_errors or [])


def _diagnostics(output: str, offsets: list[tuple[int, str]]) -> list[str]:
    errors = []
    for diagnostic in json.loads(output).get("diagnostics", []):
        if diagnostic["severity"] != "error":
            continue
        byte = diagnostic.get("range", {}).get("start", {}).get("byte")
        where = _where(_path_at(offsets, byte)) if byte is not None else "(no location)"
        errors.append(f"{where}: {diagnostic['summary']}: {diagnostic.get('detail', '')}".strip())
    return errors


def _plan_errors(output: str, offsets: list[tuple[int, str]]) -> list[str]:
    errors = []
    for line in output.splitlines():
        message = json.loads(line)
        if message.get("@level") == "error" and message.get("type") == "diagnostic":
            errors += _diagnostics(json.dumps({"diagnostics": [message["diagnostic"]]}), offsets)
    return errors


def check_stack(stack: str, config: Mapping[str, Any], directory: Path, *, plan: bool = True) -> StackRun:
    """init (offline), validate and, if that passed, plan the provider-free copy of one stack."""
    directory.mkdir(parents=True, exist_ok=True)
    free, reference_errors = _provider_free(config)
    text, offsets = dumps_with_paths(free)
    (directory / CONFIG_FILE).write_text(text)
    env = offline_env(directory)
    binary = terraform()

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([binary, *args], cwd=directory, env=env, capture_output=True, text=True)

    init = run("init", "-input=false", "-no-color")
    if init.returncode != 0:
        return StackRun(stack, directory, [f"terraform init failed: {init.stderr.strip()}"], None, env)
    validate_errors = reference_errors + _diagnostics(run("validate", "-json", "-no-color").stdout, offsets)
    plan_errors = None
    if plan and not validate_errors:
        planning = run("plan", "-input=false", "-lock=false", "-json", f"-out={PLAN_FILE}")
        plan_errors = _plan_errors(planning.stdout, offsets)
        if planning.returncode != 0 and not plan_errors:
            plan_errors = [f"terraform plan failed: {planning.stderr.strip()}"]
    return StackRun(stack, directory, validate_errors, plan_errors, env)


def check_stacks(stacks: Mapping[str, Mapping[str, Any]], root: Path, *, workers: int = 4) -> dict[str, StackRun]:
    """check_stack for each stack, side by side (Terraform runs single-threaded on a config this small)."""
    terraform()  # one clear failure when it is missing, before any thread starts
    with ThreadPoolExecutor(max_workers=workers) as pool:
        runs = pool.map(lambda item: check_stack(item[0], item[1], root / item[0]), stacks.items())
        return {run.stack: run for run in runs}
