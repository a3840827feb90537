"""What the smoke read back from its run, and the report it writes (report.json and report.md).

It reads only files: the train process's result (train.py), its log, the TensorBoard event files and
the checkpoint directory. Event files are read with tensorboardX's own protobuf (metrax writes them with
tensorboardX), so the report needs no TensorFlow or tensorboard package on the chip's machine.
"""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path

# The trainer's lines the report quotes verbatim, in absl's format (scripts/rundata has their sources).
QUOTED = re.compile(r"^[IWE]\d{4} .*\] (Train step \d+ training loss|Pre RL Training|Post RL Training|"
                    r"Intermediate Eval|RL Training Completed).*$", re.M)
# Executables a program of the run is known by (tunix's jitted functions, the smoke's sampler loop).
PROGRAMS = {"train_step": "jit__train_step", "reference_logps": "jit_compute_per_token_logps",
            "sampler": "jit_generate"}
MB = 1e6


def event_scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the event files under `directory`: tag -> [(step, value)], in file order. A
    TFRecord is length (8 bytes), its CRC (4), the Event, the Event's CRC (4)."""
    from tensorboardX.proto import event_pb2

    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(Path(directory).rglob("events.out.tfevents.*")):
        data = path.read_bytes()
        at = 0
        while at + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[at:at + 8])
            event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
            at += 12 + length + 4
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    out.setdefault(value.tag, []).append((event.step, value.simple_value))
    return out


def checkpoint_layout(actor: Path) -> dict:
    """Per saved step: its items and commit markers, and whether the arrays are in an OCDBT store."""
    if not actor.is_dir():
        return {}
    steps = {}
    for step in sorted((p for p in actor.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        files = [path for path in step.rglob("*") if path.is_file()]
        steps[step.name] = {
            "items": sorted(p.name for p in step.iterdir() if p.is_dir()),
            "commit_success": sorted(str(p.relative_to(step)) for p in files if p.name == "commit_success.txt"),
            "ocdbt": any(p.name == "manifest.ocdbt" for p in files),
            "files": len(files), "bytes": sum(p.stat().st_size for p in files)}
    return steps


def quoted_lines(log: str) -> list[str]:
    return [match.group(0) for match in QUOTED.finditer(log)]


def timing(lines: list[dict]) -> dict:
    """Time to the first train step line and seconds a step after it, from train.py's line clock."""
    steps = [entry["seconds"] for entry in lines if entry["line"].startswith("Train step ")]
    if not steps:
        return {"train_step_lines": 0}
    per = (steps[-1] - steps[0]) / (len(steps) - 1) if len(steps) > 1 else None
    return {"train_step_lines": len(steps), "first_step_seconds": steps[0],
            "seconds_per_step": None if per is None else round(per, 3)}


def program_memory(executables: list[dict]) -> dict[str, dict]:
    """The last compile of each known program (a name may compile more than once)."""
    found = {}
    for entry in executables:
        for program, name in PROGRAMS.items():
            if entry["name"] == name:
                found[program] = entry
    return found


def largest(executables: list[dict], count: int = 6) -> list[dict]:
    def size(entry):
        return entry.get("argument_bytes", 0) + entry.get("temp_bytes", 0)

    return sorted((e for e in executables if "refused" not in e), key=size, reverse=True)[:count]


def deviations(constraints: str, installed: dict[str, str]) -> list[tuple[str, str, str]]:
    """(package, pinned, installed) for each package the constraints pin that is installed at another
    version: the machine's versions win."""
    out = []
    for line in constraints.splitlines():
        name, eq, pin = line.partition("==")
        name = name.strip().lower()
        pin = pin.split(";")[0].strip()
        if eq and name in installed and installed[name] != pin:
            out.append((name, pin, installed[name]))
    return out


def installed_versions() -> dict[str, str]:
    import importlib.metadata as metadata

    return {dist.metadata["Name"].lower().replace("_", "-"): dist.version for dist in metadata.distributions()}


def steps_text(steps: list[int]) -> str:
    """1, 2, 3, 4 as `1..4`; a tag written many times at one step as `0 (x68)`."""
    if len(set(steps)) == 1 and len(steps) > 1:
        return f"{steps[0]} (x{len(steps)})"
    if len(steps) > 2 and steps == list(range(steps[0], steps[0] + len(steps))):
        return f"{steps[0]}..{steps[-1]}"
    return ", ".join(map(str, steps[:12])) + (", …" if len(steps) > 12 else "")


def mb(count) -> str:
    return "-" if count is None else f"{count / MB:,.1f} MB"


def markdown(report: dict) -> str:
    """report.md: what ran, what it measured, what was substituted and what differs from the recipe."""
    out = [f"# Real-chip smoke of {report['recipe']} ({report['date']})", "",
           f"Chip: {report['chip']}. Python {report['python']}, JAX {report['versions'].get('jax')}, jaxlib "
           f"{report['versions'].get('jaxlib')}, libtpu {report['versions'].get('libtpu')}, MaxText "
           f"{report['versions'].get('maxtext')}, tunix {report['versions'].get('google-tunix')}.", "",
           "**The rollout is substituted**: `ActorSampler` (bench/chip_smoke/actor_sampler.py) samples with "
           "the actor itself, no KV cache; vLLM and tpu_inference are not installed.", "",
           f"Model: {report['model']}.", ""]
    pinned = report.get("recipe_maxtext")
    if pinned and pinned != report["versions"].get("maxtext"):
        out += [f"**The release differs**: the recipe pins MaxText {pinned}, which needs Python 3.12 and a newer "
                f"JAX than the chip's; its commands ran under {report['versions'].get('maxtext')}, with the "
                "arguments that release has no key for dropped (below).", ""]
    out += ["## Steps", "", "| step | exit | seconds |", "| --- | --- | --- |"]
    out += [f"| {name} | {step['exit']} | {step['seconds']:.1f} |" for name, step in report["steps"].items()]
    for name, train in report["trains"].items():
        out += ["", f"## {name}", ""]
        out += [f"Arguments: `{' '.join(train['sets'])}`", ""] if train.get("sets") else []
        out += _train_section(train)
    if report.get("reload"):
        reload = report["reload"]
        out += ["", "## Reload of the export (transformers)", "",
                f"{reload.get('export_class')}; missing {reload.get('missing')}, unexpected {reload.get('unexpected')}, "
                f"mismatched {reload.get('mismatched')}; {len(reload.get('differing_tensors', []))} tensors changed by "
                f"training; tokenizer and chat template the original's: {reload.get('tokenizer_same')}, "
                f"{reload.get('chat_template_same')}."]
    out += ["", "## Changes from the rendered commands", ""]
    out += [f"- `{item}`" for item in report["changed"]]
    out += ["", "## Versions that differ from constraints-0.2.3.txt (the machine's win)", ""]
    out += [f"- {name}: pinned {pin}, ran {ran}" for name, pin, ran in report["deviations"]] or ["- none"]
    return "\n".join(out) + "\n"


def _train_section(train: dict) -> list[str]:
    memory, timed, allocator = train.get("programs", {}), train.get("timing", {}), train.get("allocator") or {}
    out = [f"Exit {train.get('exit')}; {timed.get('train_step_lines', 0)} step lines; first at "
           f"{timed.get('first_step_seconds')} s from process start; {timed.get('seconds_per_step')} s a step "
           "after it.", ""]
    if train.get("patches"):
        out += ["The recipe's patches of MaxText's files: " + "; ".join(train["patches"]) + ".", ""]
    if train.get("error"):
        out += [f"Error: `{train['error'][:600]}`", ""]
    out += ["HBM: *arguments* and *temporaries* are XLA's compiled memory statistics of the program "
            "(get_compiled_memory_stats: its inputs, and the scratch it allocates while it runs); the "
            "*allocator's peak* is the chip's `memory_stats()['peak_bytes_in_use']` at the end, the most "
            "the runtime's allocator held at once, which leaves out XLA's temporaries.", "",
            "| program | arguments | outputs | aliased | temporaries | compile s |", "| --- | --- | --- | --- | --- | --- |"]
    for name, entry in memory.items():
        if "refused" in entry:
            out.append(f"| {name} | refused: {entry['refused'][:200]} | | | | |")
        else:
            out.append(f"| {name} (`{entry['name']}`) | {mb(entry.get('argument_bytes'))} | {mb(entry.get('output_bytes'))} "
                       f"| {mb(entry.get('alias_bytes'))} | {mb(entry.get('temp_bytes'))} | {entry.get('seconds')} |")
    if train.get("largest"):
        out += ["", "The largest executables (arguments + temporaries): " + "; ".join(
            f"`{e['name']}` {mb(e.get('argument_bytes'))} + {mb(e.get('temp_bytes'))}" for e in train["largest"])]
    limit = allocator.get("bytes_limit")
    exact = "" if limit is None else f" (bytes_limit {limit:,})"
    out += ["", f"Allocator's peak {mb(allocator.get('peak_bytes_in_use'))} of {mb(limit)}{exact}; "
            f"in use at the end {mb(allocator.get('bytes_in_use'))}.", ""]
    if train.get("quoted"):
        out += ["Lines:", "", "```", *train["quoted"], "```", ""]
    if train.get("tags"):
        out += ["| TensorBoard tag | steps |", "| --- | --- |"]
        out += [f"| `{tag}` | {steps_text(steps)} |" for tag, steps in sorted(train["tags"].items())]
        out.append("")
    if train.get("checkpoints"):
        out += ["| checkpoint | items | commit markers | OCDBT | files |", "| --- | --- | --- | --- | --- |"]
        out += [f"| actor/{step} | {', '.join(c['items'])} | {len(c['commit_success'])} | {c['ocdbt']} | {c['files']} |"
                for step, c in train["checkpoints"].items()]
    return out


def write(report: dict, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "report.json").write_text(json.dumps(report, indent=1, default=str))
    (directory / "report.md").write_text(markdown(report))
    os.sync() if hasattr(os, "sync") else None
