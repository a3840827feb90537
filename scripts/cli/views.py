"""How the cloud commands' reports look: preflight's lines, the status blocks and JSON, and the runs table
or, in a narrow terminal, its blocks. Pure: the commands in cloud.py fetch, these lay out."""

from __future__ import annotations

from tpu_rl.recipes import STEPS
from tpu_rl.scripts.cli.core import fitted

def preflight_line(check, width: int):
    """`pass  name: detail` (or FAIL), wrapped to the terminal under the name; paths and commands are never
    broken (core.fitted)."""
    from rich.text import Text

    mark = "pass" if check.ok else "FAIL"
    text = Text(fitted(f"{mark}  {check.name}: {check.detail}", width, indent=len(mark) + 2))
    text.stylize("green" if check.ok else "red", 0, len(mark))
    return text

def status_view(recipe_name: str, bucket: str, report, width: int = 80):
    """The status report in any terminal width: one block per step, the step's name beside its state
    (pods, time) and its output. Long lines wrap inside the block at spaces only, so a gs:// path is never
    broken: it moves to a line of its own, or overflows whole when longer than the line (core.fitted)."""
    from rich.console import Group
    from rich.text import Text

    from tpu_rl.scripts.pipeline.session import NO_OUTPUT

    indent = max(len(row.step) for row in report.rows) + 2 if report.rows else 0
    lines = [Text(fitted(f"{recipe_name}: {report.where}, outputs in gs://{bucket}", width))]
    for row in report.rows:
        state = ", ".join(part for part in (_state_word(row), row.capacity and f"on {row.capacity}",
                                            row.pods and f"pods {row.pods}", row.time) if part)
        # A step with none of its output yet (never started, or still running) takes one line.
        output = [] if row.output == NO_OUTPUT else [f"output {row.output}"]
        state += ", no output yet" if row.output == NO_OUTPUT else ""
        cells = [fitted(cell, width - indent) for cell in (state, *([row.progress] if row.progress else []), *output)]
        block = "\n".join(cells).splitlines()
        text = Text(row.step.ljust(indent) + block[0] + "".join(f"\n{' ' * indent}{line}" for line in block[1:]))
        text.stylize("bold", 0, len(row.step))
        lines.append(text)
    for line in (report.ending, report.driver, report.note):
        if line:
            lines.append(Text(fitted(line, width)))
    return Group(*lines)

def _state_word(row) -> str:
    """A step without a JobSet in words that agree with its output: done when the output is verified (the
    JobSet was deleted, or ran elsewhere), else no JobSet. The JSON keeps the phase (`absent`)."""
    if row.state != "absent":
        return row.state
    return "done, no JobSet left" if row.output == "verified" else "no JobSet"


def status_json(session, report) -> dict:
    """The status report as data: the same cells as the view, one object per step."""
    import dataclasses

    return {"recipe": session.recipe.name, "run": session.paths.run_name, "where": report.where,
            "bucket": f"gs://{session.settings.gcs_bucket}", "steps": [dataclasses.asdict(row) for row in report.rows],
            "ending": report.ending or None, "driver": report.driver or None, "note": report.note or None}

RUN_COLUMNS = ("run", "status", *STEPS, "step", "accuracy", "reward", "cost", "started", "took", "differs")

def run_cells(run) -> tuple[str, ...]:
    return (run.run, run.state_text, *(run.step_state(step) for step in STEPS), run.step_text,
            run.accuracy_text, run.reward_text, run.cost_text, run.started_text, run.duration_text, run.differs_text)

def runs_stacked(runs) -> list[str]:
    """One block of short lines per run: for a terminal too narrow for the table."""
    from rich.markup import escape

    from tpu_rl.scripts.pipeline.runs import RESUMED_NOTE

    lines = []
    for run in runs:
        steps = ", ".join(f"{step} {run.step_state(step)}" for step in STEPS)
        lines += [f"[bold]{escape(run.run)}[/]  {escape(run.state_text)}, step {run.step_text}, reward "
                  f"{run.reward_text}, cost {escape(run.cost_text)}",
                  *([f"  accuracy {escape(run.accuracy_figures)} ({run.accuracy_label})"]
                    if run.accuracy_text != "-" else []),
                  *([f"  {escape(RESUMED_NOTE)}"] if run.accuracy_resumed is not None else []),
                  f"  steps    {escape(steps)}",
                  f"  started  {escape(run.started_text)}, took {run.duration_text}"]
        if run.differs:
            lines.append(f"  differs  {escape(run.differs_text)}")
    return lines
