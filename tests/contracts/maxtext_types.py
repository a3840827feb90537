"""Each override key's type, bounds and choices as a MaxText release validates it, read from its wheel.

pyconfig hands every `key=value` item to the release's pydantic config class (MaxTextConfig in 0.2.3,
RLConfig for train_rl from 0.2.4), whose fields are declared in configs/types.py: the annotation gives the
type (Literal and Enum members give the choices, pydantic's NonNegativeFloat/PositiveInt/... a bound) and
`Field(..., ge=, gt=, le=, lt=)` the bounds. Read without importing the wheel (it needs jax), like
maxtext_schema.py. Two more things make a key change nothing, also read from types.py:
- the config class's mode="after" validator assigns some fields unconditionally (0.2.4 RLConfig sets
  `steps` to train_steps), so a value given for them is overwritten;
- 0.2.4 RLConfig's mode="before" validator map_flat_fields_to_nested_models copies every top-level key
  whose name is a field of a nested model into that model, so `dataset.batch_size=8` loses to the
  top-level `batch_size` that rl.yml sets;
- where there is no such copy (0.2.3), a nested model's field that the config class also has at top level
  (MaxTextConfig inherits RL's fields and has `rl: RL`) is two settings, and when no module of the wheel
  outside experimental/ reads the top-level one (`.num_iterations` other than `.rl.num_iterations`, or the
  name as a string), train_rl never sees it: `num_iterations=3` trains rl.num_iterations' 1 iteration.
And one more thing refuses a value: pyconfig's validate_no_keys_overridden_twice exits when a command-line
key is also set, to another value, by the model's configs/models/<model>.yml (model_name without
"-Instruct"), unless override_model_config is true; model_values reads those files.

tools/generate_maxtext_keys.py writes these into recipes/runs/maxtext_keys/<version>.toml, and
tests/test_maxtext_values.py checks that each shipped file equals what this module reads from the wheel.
"""

from __future__ import annotations

import ast
import json
import re
import zipfile
from dataclasses import dataclass
from functools import cached_property

from contracts.maxtext_schema import MaxTextSchema

# pydantic.types aliases MaxText uses, as the bound they add (pydantic/types.py: NonNegativeFloat =
# Annotated[float, annotated_types.Ge(0)], NonNegativeInt likewise, PositiveInt = Annotated[int, Gt(0)]).
_PYDANTIC_ALIASES = {"NonNegativeFloat": ("float", {"ge": 0}), "NonNegativeInt": ("int", {"ge": 0}),
                     "PositiveInt": ("int", {"gt": 0}), "PositiveFloat": ("float", {"gt": 0})}
_BUILTINS = {"int", "float", "bool", "str", "list", "dict", "Any"}
_BOUNDS = ("ge", "gt", "le", "lt")
_FLAT_TO_NESTED = "map_flat_fields_to_nested_models"  # 0.2.4 RLConfig, configs/types.py
SOURCES = ("configs/types.py", "common/common_types.py", "configs/pyconfig.py")
# The configs/models/*.yml of 0.2.3 and 0.2.4 also set run choices beside the network: the optimizer
# (AdamW, Optimizer), checkpointing, data (DatasetGeneral, TfdsDataset), mesh and sharding (HardwareAndMesh,
# LayoutAndSharding), the sequence length (InferenceGeneral.max_target_length), the run (RunInfo), the loop
# (TrainingLoop: enable_dropout, target_eval_loss) and MoE kernels (MoEKernels: megablox, sparse_matmul).
# Their keys change how a checkpoint is trained or sampled, not what it holds.
MODEL_YML_RUN_CLASSES = ("AdamW", "Optimizer", "Checkpointing", "DatasetGeneral", "TfdsDataset", "HardwareAndMesh",
                         "LayoutAndSharding", "InferenceGeneral", "RunInfo", "TrainingLoop", "MoEKernels")
# types.py DataTypes.weight_dtype ("The data type for model weights") and Quantization.quantization: the
# weights' dtype and quantized form, which no model yml sets.
WEIGHT_KEYS = ("weight_dtype", "quantization")
# Keys no model yml of the release sets (or whose class is a run class above) that change the weights'
# shapes or layout, so a checkpoint does not load under another value. maxtext 0.2.4 configs/types.py line
# of the field, and the code that reads it (0.2.3 declares the same fields).
SHAPE_KEYS = {
    "global_parameter_scale": "types.py L515; the validator scales emb_dim, mlp_dim, heads, layers by it (L4676)",
    "fused_mlp": "types.py L546; layers/linears.py L492 builds one wi instead of wi_0/wi_1",
    "qk_norm_with_scale": "types.py L547; layers/attentions.py L496 gives the q/k norms a scale param",
    "mtp_num_layers": "types.py L560; models/models.py L95 adds the multi-token prediction layers",
    "use_qk_norm_in_gdn": "types.py L1088; models/qwen3.py L67 norms q/k in the gated delta net",
    "inhomogeneous_layer_cycle_interval": "types.py L1118; layers/decoders.py L1087 scan length of layers",
    "param_scan_axis": "types.py L1126; layers/decoders.py L658 the axis the scanned params stack on",
}
# Keys a model yml sets that shape no weight: the training loss, logging, a kernel or an encoder the
# recipes do not train (0.2.4 types.py L882, L1053, L1054, L1066, L599, L2399), so eval may change them.
HARMLESS_KEYS = {
    "load_balance_loss_weight": "a term of the training loss",
    "routed_bias_update_rate": "the router bias update of a training step",
    "log_moe_bias_norms": "logging",
    "use_batch_split_schedule": "a DeepSeek kernel schedule",
    "attention": "the attention kernel",
    "attention_dropout_for_audio": "dropout of the audio encoder",
}


@dataclass
class MaxTextTypes:
    schema: MaxTextSchema

    @cached_property
    def _modules(self) -> list[ast.Module]:
        return [ast.parse(self.schema.read(path)) for path in ("configs/types.py", "common/common_types.py")]

    @cached_property
    def _classes(self) -> dict[str, ast.ClassDef]:
        return {node.name: node for tree in self._modules for node in tree.body if isinstance(node, ast.ClassDef)}

    @cached_property
    def _aliases(self) -> dict[str, ast.expr]:
        """Module-level `Name = <type>` of types.py (PathStr = str, ModelName = Literal[...])."""
        tree = self._modules[0]
        return {node.targets[0].id: node.value for node in tree.body
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and not isinstance(node.value, ast.Call)}

    def _enum_values(self, name: str) -> list | None:
        node = self._classes.get(name)
        if node is None or not any("Enum" in ast.unparse(base) for base in node.bases):
            return None
        return [ast.literal_eval(statement.value) for statement in node.body
                if isinstance(statement, ast.Assign) and isinstance(statement.targets[0], ast.Name)]

    def _field_nodes(self, class_name: str) -> dict[str, ast.AnnAssign]:
        """A class's fields as pydantic collects them: the bases' in reverse MRO order (so the first base
        listed wins a name two bases declare), then the class's own."""
        node = self._classes[class_name]
        result: dict[str, ast.AnnAssign] = {}
        for base in reversed(node.bases):
            if isinstance(base, ast.Name) and base.id in self._classes:
                result.update(self._field_nodes(base.id))
        for statement in node.body:
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                result[statement.target.id] = statement
        return result

    def _members(self, annotation: ast.expr, spec: dict) -> list[str]:
        """The union members of an annotation, each as a word of the shipped files' type grammar: int,
        float, bool, str, None, Any, list, list[int], list[str], dict, literal, enum, model. Choices,
        the enum's or model's name and the bounds an alias implies go into `spec`."""
        if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
            return self._members(annotation.left, spec) + self._members(annotation.right, spec)
        if isinstance(annotation, ast.Constant) and annotation.value is None:
            return ["None"]
        if isinstance(annotation, ast.Subscript):
            outer = ast.unparse(annotation.value)
            if outer == "Optional":
                return self._members(annotation.slice, spec) + ["None"]
            if outer == "Literal":
                items = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
                spec["choices"] = [ast.literal_eval(item) for item in items]
                return ["literal"]
            if outer == "list":
                inner = ast.unparse(annotation.slice)
                return [f"list[{inner}]" if inner in ("int", "str", "float") else "list"]
            if outer == "dict":
                return ["dict"]
        name = ast.unparse(annotation)
        if name in _PYDANTIC_ALIASES:
            base, bounds = _PYDANTIC_ALIASES[name]
            spec.update(bounds)
            return [base]
        if name in _BUILTINS:
            return [name]
        if name in self._aliases:
            return self._members(self._aliases[name], spec)
        values = self._enum_values(name)
        if values is not None:
            spec["enum"], spec["choices"] = name, values
            return ["enum"]
        if name in self._classes and self.schema._is_model(name):
            spec["model"] = name
            return ["model"]
        raise ValueError(f"MaxText {self.schema.version}: no type word for the annotation {name}")

    def spec(self, node: ast.AnnAssign) -> dict:
        """One field: {type, choices?, enum?, model?, ge/gt/le/lt?, before_validator?}."""
        spec: dict = {}
        members = self._members(node.annotation, spec)
        ordered = [member for member in members if member != "None"] + (["None"] if "None" in members else [])
        spec = {"type": " | ".join(dict.fromkeys(ordered)), **spec}
        value = node.value
        if isinstance(value, ast.Call) and ast.unparse(value.func) == "Field":
            for keyword in value.keywords:
                if keyword.arg in _BOUNDS:
                    spec[keyword.arg] = ast.literal_eval(keyword.value)
        return spec

    def _before_validated(self, class_name: str) -> set[str]:
        """Fields a `field_validator(name, mode="before")` reshapes before pydantic sees the type (0.2.x:
        constant_bound_config, from a comma-separated string)."""
        names: set[str] = set()
        for node in self._classes.values():
            for statement in node.body:
                for call in ast.walk(statement):
                    if (isinstance(call, ast.Call) and ast.unparse(call.func) == "field_validator"
                            and any(k.arg == "mode" and ast.literal_eval(k.value) == "before" for k in call.keywords)):
                        names |= {ast.literal_eval(arg) for arg in call.args}
        return names

    def key_specs(self, module: str) -> dict[str, dict]:
        """Every override key of `module` (maxtext_schema.override_keys) with its field's spec."""
        config_class = self.schema.config_class(module)
        reshaped = self._before_validated(config_class)
        top = self._field_nodes(config_class)
        if self.schema.accepts_nested_fields:  # 0.2.4: a nested model's field by its bare name too
            pending = [node for node in top.values()]
            seen: set[str] = set()
            while pending:
                nested = self.schema.nested_model(pending.pop().annotation)
                if nested and nested not in seen:
                    seen.add(nested)
                    for name, node in self._field_nodes(nested).items():
                        top.setdefault(name, node)
                        pending.append(node)
        result: dict[str, dict] = {}
        for key in self.schema.override_keys(module):
            node_map, node = top, None
            for part in key.split("."):
                node = node_map[part]
                nested = self.schema.nested_model(node.annotation)
                node_map = self._field_nodes(nested) if nested else {}
            spec = self.spec(node)
            if key.rsplit(".", 1)[-1] in reshaped:
                spec["before_validator"] = True
            result[key] = spec
        return result

    def _validator(self, class_name: str, mode: str) -> ast.FunctionDef | None:
        for statement in self._classes[class_name].body:
            if isinstance(statement, ast.FunctionDef) and any(
                    "model_validator" in ast.unparse(d) and f'"{mode}"' in ast.unparse(d).replace("'", '"')
                    for d in statement.decorator_list):
                return statement
        return None

    def set_by_maxtext(self, module: str) -> dict[str, dict]:
        """Override keys the config class's after-validator assigns on every path (a statement at the top of
        its body), with where and to what: a value given for them changes nothing."""
        config_class = self.schema.config_class(module)
        validator = self._validator(config_class, "after")
        keys = set(self.schema.override_keys(module))
        result: dict[str, dict] = {}
        for statement in validator.body if validator else []:
            name, value = None, None
            if (isinstance(statement, ast.Assign) and isinstance(statement.targets[-1], ast.Attribute)
                    and ast.unparse(statement.targets[-1].value) == "self"):
                name, value = statement.targets[-1].attr, statement.value
            elif (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
                  and ast.unparse(statement.value.func) == "object.__setattr__"):
                name, value = ast.literal_eval(statement.value.args[1]), statement.value.args[2]
            if name in keys and not self._reads_before(validator, statement, value, name):
                result[name] = {"line": statement.lineno, "validator": f"{config_class}.{validator.name}",
                                "value": ast.unparse(value)}
        return result

    @staticmethod
    def _reads_before(validator: ast.FunctionDef, assignment: ast.stmt, value: ast.expr, name: str) -> bool:
        """Whether the validator reads the field's given value before it assigns it (0.2.3's num_slices is
        passed to get_num_slices, which keeps a value other than -1): then the value counts."""
        earlier = [statement for statement in validator.body if statement.lineno < assignment.lineno]
        for node in (child for tree in [*earlier, value] for child in ast.walk(tree)):
            if (isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.ctx, ast.Load)
                    and ast.unparse(node.value) == "self"):
                return True
            if isinstance(node, ast.Constant) and node.value == name:
                return True
        return False

    def copied_from_top_level(self, module: str) -> dict[str, str]:
        """Dotted keys a top-level key of the release's config yml overwrites (only where the config class
        has map_flat_fields_to_nested_models): `dataset.batch_size` -> `batch_size`."""
        config_class = self.schema.config_class(module)
        before = self._validator(config_class, "before")
        if before is None or before.name != _FLAT_TO_NESTED:
            return {}
        flat = {key for key, value in self.schema.config_yml(module).items() if not isinstance(value, dict)}
        result: dict[str, str] = {}
        for name, node in self._field_nodes(config_class).items():
            nested = self.schema.nested_model(node.annotation)
            for inner in self._field_nodes(nested) if nested else {}:
                if inner in flat:
                    result[f"{name}.{inner}"] = inner
        return result

    def flat_to_nested_line(self, module: str) -> int | None:
        before = self._validator(self.schema.config_class(module), "before")
        return before.lineno if before is not None and before.name == _FLAT_TO_NESTED else None

    @cached_property
    def _sources(self) -> list[str]:
        """Every Python module of the wheel that train_rl may import: all but experimental/ and tests."""
        with zipfile.ZipFile(self.schema.wheel) as archive:
            return [archive.read(name).decode(errors="replace") for name in archive.namelist()
                    if name.startswith("maxtext/") and name.endswith(".py")
                    and not name.startswith(("maxtext/experimental/", "maxtext/tests/"))]

    def read_only_nested(self, module: str) -> dict[str, str]:
        """Top-level keys no module reads, where the release reads the nested model's field of that name
        instead (no map_flat_fields_to_nested_models): `num_iterations` -> `rl.num_iterations`."""
        if self.flat_to_nested_line(module):
            return {}
        config_class = self.schema.config_class(module)
        top = self._field_nodes(config_class)
        result: dict[str, str] = {}
        for name, node in top.items():
            nested = self.schema.nested_model(node.annotation)
            for inner in self._field_nodes(nested) if nested else {}:
                if inner not in top or self.schema.nested_model(top[inner].annotation):
                    continue
                read = re.compile(rf"(?<!\.{name})\.{inner}\b|[\"']{inner}[\"']")
                if not any(read.search(source) for source in self._sources):
                    result[inner] = f"{name}.{inner}"
        return result

    def model_values(self, model_name: str) -> dict:
        """What configs/models/<model>.yml sets, as omegaconf loads it (pyconfig strips "-Instruct" first).
        A null is left out: TOML has none, and no recipe's model sets one."""
        from omegaconf import OmegaConf  # noqa: PLC0415

        base = model_name.replace("-Instruct", "")
        values = OmegaConf.to_container(OmegaConf.create(self.schema.read(f"configs/models/{base}.yml")))
        return {key: value for key, value in values.items() if value is not None}

    def model_keys(self) -> dict[str, str]:
        """The keys that make the model (tpu-rl eval refuses a new value for them), each with the types.py
        class that declares it: every key a configs/models/*.yml of the release sets, unless its class
        configures the run rather than the network (MODEL_YML_RUN_CLASSES), and the dtype/quantization
        of the weights (WEIGHT_KEYS), which decide how the checkpoint is read, and the SHAPE_KEYS; never
        the HARMLESS_KEYS."""
        import posixpath

        import yaml  # noqa: PLC0415

        owner = {}
        for name, node in self._classes.items():
            for statement in node.body:
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                    owner.setdefault(statement.target.id, name)
        with zipfile.ZipFile(self.schema.wheel) as archive:
            ymls = sorted(name for name in archive.namelist()
                          if posixpath.dirname(name) == "maxtext/configs/models" and name.endswith(".yml"))
        keys = {key for name in ymls for key in (yaml.safe_load(self.schema.read(name.removeprefix("maxtext/")))
                                                  or {})}
        keys = {key for key in keys if owner.get(key) not in MODEL_YML_RUN_CLASSES and key not in HARMLESS_KEYS}
        keys |= set(WEIGHT_KEYS) | {key for key in SHAPE_KEYS if key in owner}
        return {key: owner.get(key, "?") for key in sorted(keys)}

    def config_values(self, module: str) -> dict:
        """The value each override key of `module` has before the model's yml and the command line: what
        its config yml says (with the base_config files it names, merged as pyconfig._load_config does),
        else the literal default of its field in configs/types.py (an enum member as its value). A value
        omegaconf would interpolate (`${...}`), a default that is not a literal (a factory) and a null are
        left out: tpu-rl eval reads a key left out as null."""
        import posixpath

        from omegaconf import OmegaConf  # noqa: PLC0415

        def load(name: str):
            config = OmegaConf.create(self.schema.read(name))
            if "base_config" in config:
                base = posixpath.normpath(posixpath.join(posixpath.dirname(name), config["base_config"]))
                if not self.schema.exists(base):
                    base = f"configs/{config['base_config']}"
                config = OmegaConf.merge(load(base), config)
            return config

        name = "configs/post_train/rl.yml" if module.endswith(".train_rl") else "configs/base.yml"
        yml = OmegaConf.to_container(load(name), resolve=False)
        fields = self._field_nodes(self.schema.config_class(module))
        result: dict = {}
        for key in self.key_specs(module):
            found, value = True, yml
            for part in key.split("."):
                if isinstance(value, dict) and part in value:
                    value = value[part]
                else:
                    found = False
                    break
            if not found and "." not in key and key in fields:
                found, value = self._literal_default(fields[key])
            if found and value is not None and "${" not in json.dumps(value):
                result[key] = value
        return result

    def _enum_member(self, value: ast.expr) -> tuple[bool, object]:
        """The value of `SomeEnum.MEMBER` (types.py's Field(QuantizationType.NONE) is ""), else not found."""
        if not (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name)
                and self._enum_values(value.value.id) is not None):
            return False, None
        for statement in self._classes[value.value.id].body:
            if (isinstance(statement, ast.Assign) and isinstance(statement.targets[0], ast.Name)
                    and statement.targets[0].id == value.attr):
                return True, ast.literal_eval(statement.value)
        return False, None

    def _literal_default(self, node: ast.AnnAssign) -> tuple[bool, object]:
        value = node.value
        if isinstance(value, ast.Call) and ast.unparse(value.func) == "Field":
            given = value.args[0] if value.args else next((k.value for k in value.keywords if k.arg == "default"), None)
            if given is None:
                return False, None
            value = given
        if value is None:
            return False, None
        found, member = self._enum_member(value)
        if found:
            return True, member
        try:
            return True, ast.literal_eval(value)
        except (ValueError, SyntaxError, TypeError):
            return False, None
