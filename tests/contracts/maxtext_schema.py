"""What a pinned MaxText release accepts, read from its wheel without importing it.

MaxText's rule (configs/pyconfig.py): every override key must be a field of the config class
(MaxTextConfig, or RLConfig for train_rl from 0.2.4), and from 0.2.4 may also be a field of a pydantic
model nested in it; otherwise it exits with "'<key>' not in ...". Dotted keys (rl.num_generations) are
merged by omegaconf and never checked, so we check them against the nested model and the yml section
ourselves. Flags (--x) are the module's own argparse/absl flags. The model name must have
models/<name>.yml, where MaxText strips "-Instruct" first (so llama3.1-8b-Instruct loads llama3.1-8b.yml).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "maxtext"
_BOOL_WORDS = {"true", "false", "1", "0"}


def fetch_wheel(version: str) -> tuple[Path | None, str]:
    """The maxtext wheel of a version from .cache/ (downloaded once); (None, reason naming the wheel) when
    unavailable. The tests skip then, which fails the run under CI (tests/ci_skips.py)."""
    wheel = CACHE / f"maxtext-{version}-py3-none-any.whl"
    if wheel.is_file():
        return wheel, ""
    CACHE.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "download", f"maxtext=={version}", "--no-deps", "--python-version", "3.12",
         "--only-binary=:all:", "-d", str(CACHE), "--quiet", "--disable-pip-version-check"],
        capture_output=True, text=True, timeout=300,
    )
    if wheel.is_file():
        return wheel, ""
    return None, (f"could not download the wheel {wheel.name} (maxtext=={version}) from PyPI: "
                  f"{result.stderr.strip()[-300:]}")


@dataclass
class MaxTextSchema:
    version: str
    wheel: Path

    def read(self, relative: str) -> str:
        with zipfile.ZipFile(self.wheel) as archive:
            return archive.read(f"maxtext/{relative}").decode()

    def exists(self, relative: str) -> bool:
        with zipfile.ZipFile(self.wheel) as archive:
            return f"maxtext/{relative}" in archive.namelist()

    @cached_property
    def _classes(self) -> dict[str, ast.ClassDef]:
        tree = ast.parse(self.read("configs/types.py"))
        return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}

    def fields(self, class_name: str) -> dict[str, ast.expr]:
        """Annotated fields of a class in types.py, including those of its bases defined there."""
        node = self._classes[class_name]
        result: dict[str, ast.expr] = {}
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in self._classes:
                result.update(self.fields(base.id))
        for statement in node.body:
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                result[statement.target.id] = statement.annotation
        return result

    def _is_model(self, class_name: str) -> bool:
        """A pydantic model (a mapping in YAML), not an enum: BaseModel among its bases in types.py."""
        bases = [base.id for base in self._classes[class_name].bases if isinstance(base, ast.Name)]
        return "BaseModel" in bases or any(base in self._classes and self._is_model(base) for base in bases)

    def nested_model(self, annotation: ast.expr) -> str | None:
        """The pydantic model a field holds directly, if any (pyconfig also accepts its fields at top level)."""
        if isinstance(annotation, ast.Name) and annotation.id in self._classes and self._is_model(annotation.id):
            return annotation.id
        return None

    def config_class(self, module: str) -> str:
        """The pydantic class a module validates against, read from the module's own source."""
        source = self.read(module.removeprefix("maxtext.").replace(".", "/") + ".py")
        found = re.search(r"config_class\s*=\s*types\.(\w+)", source)
        return found.group(1) if found else "MaxTextConfig"

    @cached_property
    def accepts_nested_fields(self) -> bool:
        """Whether pyconfig also accepts a nested model's field by its bare name. 0.2.4's
        _check_for_invalid_keys recurses into every field whose annotation has model_fields, at any depth;
        0.2.3's _prepare_for_pydantic checks `key not in types.MaxTextConfig.model_fields` and nothing else
        (configs/pyconfig.py of each wheel)."""
        return "def _check_for_invalid_keys(" in self.read("configs/pyconfig.py")

    def accepted(self, config_class: str) -> dict[str, ast.expr]:
        """Top-level keys MaxText accepts: the class's fields and, where pyconfig does so (see
        accepts_nested_fields), the fields of the models nested in them, recursively."""
        accepted = dict(self.fields(config_class))
        if not self.accepts_nested_fields:
            return accepted
        pending, seen = list(accepted.values()), set()
        while pending:
            nested = self.nested_model(pending.pop())
            if nested and nested not in seen:
                seen.add(nested)
                for name, inner in self.fields(nested).items():
                    accepted.setdefault(name, inner)
                    pending.append(inner)
        return accepted

    def override_keys(self, module: str) -> list[str]:
        """Every key a `key=value` override of `module` may name, sorted: the accepted top-level keys, and
        `field.sub` for each field of a model nested in a config-class field (omegaconf turns a dotted key
        into that mapping; a sub-key outside the model is dropped without a word)."""
        config_class = self.config_class(module)
        keys = set(self.accepted(config_class))

        def dotted(prefix: str, model: str, seen: tuple[str, ...]) -> None:
            for name, annotation in self.fields(model).items():
                keys.add(f"{prefix}.{name}")
                inner = self.nested_model(annotation)
                if inner and inner not in seen:
                    dotted(f"{prefix}.{name}", inner, (*seen, inner))

        for name, annotation in self.fields(config_class).items():
            nested = self.nested_model(annotation)
            if nested:
                dotted(name, nested, (nested,))
        return sorted(keys)

    def config_yml(self, module: str) -> dict:
        name = "post_train/rl.yml" if module.endswith(".train_rl") else "base.yml"
        return yaml.safe_load(self.read(f"configs/{name}")) or {}

    def flags(self, module: str) -> set[str]:
        source = self.read(module.removeprefix("maxtext.").replace(".", "/") + ".py")
        argparse_flags = re.findall(r"add_argument\(\s*[\"']--(\w+)[\"']", source)
        absl_flags = re.findall(r"flags\.DEFINE_\w+\(\s*[\"'](\w+)[\"']", source)
        return set(argparse_flags) | set(absl_flags)

    def model_exists(self, model_name: str) -> bool:
        base = model_name.replace("-Instruct", "")
        return self.exists(f"configs/models/{base}.yml")

    def check(self, module: str, overrides: tuple[str, ...] | list[str], flags: tuple[str, ...] | list[str] = ()) -> list[str]:
        """Every problem MaxText (or its silent dotted-key merge) would have with this command line."""
        problems: list[str] = []
        config_class = self.config_class(module)
        accepted = self.accepted(config_class)
        for item in overrides:
            key, _, value = item.partition("=")
            top, _, sub = key.partition(".")
            if top not in accepted:
                problems.append(f"'{top}' is not a MaxText {self.version} {config_class} field ({module})")
                continue
            nested = self.nested_model(accepted[top])
            if sub:
                section = self.config_yml(module).get(top)
                known = set(self.fields(nested)) if nested else set()
                known |= set(section) if isinstance(section, dict) else set()
                if sub not in known:
                    problems.append(f"'{key}': '{sub}' is not a key of '{top}' in MaxText {self.version}")
            elif nested and not value.lstrip().startswith("{"):
                problems.append(f"'{key}={value}': '{key}' is a mapping ({nested}) in MaxText {self.version}")
            elif ast.unparse(accepted[top]) == "bool" and value.lower() not in _BOOL_WORDS:
                problems.append(f"'{key}={value}': '{key}' is a bool in MaxText {self.version}")
            if key == "vllm_additional_config":
                # vLLM builds a second MaxText config from maxtext_config; its keys obey the same schema.
                inner = (yaml.safe_load(value) or {}).get("maxtext_config", {})
                problems += [f"vllm_additional_config.maxtext_config.{name} is not a MaxText {self.version} field"
                             for name in inner if name not in accepted]
            if key == "model_name" and not self.model_exists(value):
                problems.append(f"model_name '{value}' has no configs/models yml in MaxText {self.version}")
        known_flags = self.flags(module)
        for flag in flags:
            name = flag.removeprefix("--").split("=", 1)[0]
            if name not in known_flags:
                problems.append(f"'--{name}' is not a flag of {module} in MaxText {self.version}")
        return problems
