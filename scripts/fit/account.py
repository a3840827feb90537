"""The fit account: what one chip holds at a run's peak, from the compiled programs (maxtext_compile.py's
result) and vLLM's share, against the chip's limit less the margin (recipes/fit MARGIN).

A trainer chip holds the actor, the reference model and the optimizer state for the whole run, and one
program at a time beside them: the train step or the reference log-probs; the peak is the resident
state plus the largest program, not their sum. Where vLLM shares the chips (the VM recipe), its
weights and KV cache fill hbm_utilization_vllm of each chip beside the two models, and the optimizer
and the programs get the rest. On its own chips (Pathways) vLLM takes that share of the sampler chips.

Each program was compiled as the chip compiles it; its part is what the compiler counts (arguments,
outputs not donated, temporaries: the figures of its refusals) plus what sits beside it. Before the
first step, tunix 683256db places the optimizer state by a constraint that copies it, so for a moment
the chip holds it twice (measured on a v5e chip: bench/chip_smoke/results/). vLLM's own programs cannot
be compiled here: its start is an account of its weights and one max-length sequence of KV cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpu_rl.recipes import UserError
from tpu_rl.recipes.fit import MARGIN

GIB = 1 << 30

# What to change when a part does not fit: the settings that size it.
BATCH = ("train_micro_batch_size", "rl.num_generations", "max_target_length")
PART_NAMES = {"train_step": "the train step", "reference_logps": "the reference log-probs",
              "placement": "the optimizer's first placement", "vllm": "vLLM's start"}


def laid_out(result: dict, recipe: str) -> None:
    """UserError when the run's parallelism cannot be laid out on its trainer or sampler chips (before any
    memory is counted)."""
    if "rollout_refused" in result:
        raise UserError(f"{recipe} cannot lay out its rollout on its {result['sampler_chips']} sampler chips of "
                        f"{result['accelerator']}: rollout_data, _tensor and _expert_parallelism (at most one -1, "
                        f"which takes what is left) must multiply to {result['sampler_chips']}; change them "
                        f"(MaxText: {result['rollout_refused']})")
    if "mesh_refused" not in result:
        return
    axes = " × ".join(f"{key.removeprefix('ici_').removesuffix('_parallelism')} {value}"
                      for key, value in result["axes"].items()) or "none"
    raise UserError(f"{recipe} cannot be laid out on its {result['trainer_chips']} trainer chips of "
                    f"{result['accelerator']}: its ici_*_parallelism ({axes}; -1 takes what is left) must "
                    f"multiply to {result['trainer_chips']}; change them (MaxText: {result['mesh_refused']})")


def gib(count: float) -> str:
    return f"{count / GIB:.1f} GiB"


@dataclass(frozen=True)
class Part:
    """One program, or a moment, on one chip: what the chip holds then, against what it may hold."""

    name: str
    total: int | None  # bytes at the peak; None: more than the chip, by the compiler's refusal
    allowed: int  # the most it may hold
    # The HBM the compiler said it had when it refused the program: the chip's, or less under a recipe's
    # cap (xla_flags), where a need the chip could hold still cannot run. None: compiled.
    refused_under: int | None = None

    @property
    def fits(self) -> bool:
        return self.refused_under is None and self.total is not None and self.total <= self.allowed

    @property
    def shown(self) -> str:
        return gib(self.total) if self.total is not None else "more than the chip"


@dataclass(frozen=True)
class Fit:
    result: dict
    margin_share: float = MARGIN  # of the chip's limit kept free; 0 to compare with a chip's own verdict
    margin_why: str | None = None  # a recipe's reason for keeping less than MARGIN, said with its verdict
    flags: tuple[str, ...] = ()  # the recipe's xla_flags, each program's compile options

    @property
    def limit(self) -> int:
        return self.result["limit_bytes"]

    @property
    def margin(self) -> int:
        return round(self.margin_share * self.limit)

    @property
    def held(self) -> dict:
        return self.result["held_bytes"]

    @property
    def resident(self) -> int:
        """The trainer chip's state for the whole run: both models and the optimizer."""
        return sum(self.held.values())

    @property
    def with_vllm(self) -> bool:
        return self.result.get("sampler", "vllm") == "vllm"  # "actor": the smoke samples with the actor

    @property
    def vllm_beside(self) -> int:
        """What vLLM holds on a trainer chip: its share less the two models, where it shares the chips."""
        if not self.result["shared_chips"] or not self.with_vllm:
            return 0
        return self.result["vllm_share_bytes"] - self.held["actor"] - self.held["reference"]

    def program(self, name: str) -> Part:
        compiled = self.result["programs"][name]
        if "refused" in compiled:  # the program alone; the compiler's need, when it names one
            need = compiled.get("need_bytes")
            return Part(name, None if need is None else need + compiled["beside_bytes"], self.limit - self.margin,
                        refused_under=compiled.get("limit_bytes") or self.limit)
        own = (compiled["argument_bytes"] + compiled["output_bytes"] - compiled["alias_bytes"]
               + compiled["temp_bytes"])
        return Part(name, own + compiled["beside_bytes"], self.limit - self.margin)

    @property
    def placement(self) -> Part | None:
        """tunix 683256db's first step constrains the optimizer state to its layout, a copy of it beside
        the old (PeftTrainer._shard_optimizer); c4ec573d moves only what its layout changes."""
        if self.result["trainer_rules"]["layout"] != "constrained":
            return None
        total = self.resident + self.held["optimizer"] + self.vllm_beside
        return Part("placement", total, self.limit - self.margin)

    @property
    def vllm_start(self) -> Part:
        """vLLM starts when its weights, what else the chip holds then and one max-length sequence of KV
        cache fit its share (tpu_inference determine_available_memory; vLLM's own KV-cache check), and
        its share fits the chip."""
        before = self.held["actor"] + self.held["reference"] if self.result["shared_chips"] else 0
        need = (before + self.result["vllm_weights_bytes"]
                + self.result["kv_bytes_per_token"] * self.result["max_model_len"])
        share = self.result["vllm_share_bytes"]
        if share > self.limit:  # it fills its share, which the chip does not have
            return Part("vllm", max(need, share), self.limit)
        return Part("vllm", need, share)

    @property
    def programs(self) -> list[Part]:
        names = [name for name in PART_NAMES if name in self.result["programs"]]
        return [self.program(name) for name in names] + ([self.placement] if self.placement else [])

    @property
    def parts(self) -> list[Part]:
        return [*self.programs, *([self.vllm_start] if self.with_vllm else [])]

    @property
    def largest(self) -> Part:
        """The trainer chip's highest moment (an unknown peak is the highest)."""
        return max(self.programs, key=lambda part: float("inf") if part.total is None else part.total)

    @property
    def fits(self) -> bool:
        return all(part.fits for part in self.parts)

    @property
    def peak(self) -> int | None:
        return self.largest.total

    @property
    def headroom(self) -> int | None:
        return None if self.peak is None else self.limit - self.peak

    @property
    def known_peak(self) -> int:
        """The peak of a plan that says it: the summary and docs/fit.md's table speak only of those."""
        if self.peak is None:
            raise ValueError(f"the plan on {self.result['accelerator']} has no known peak: the compiler refused "
                             f"{self.largest.name} without naming its need")
        return self.peak

    def mesh(self) -> str:
        axes = ", ".join(f"{name} {size}" for name, size in sorted(self.result["trainer_mesh"].items())) or "one chip"
        chips = self.result["trainer_chips"]
        return f"{chips} trainer chip{'s' if chips != 1 else ''} ({axes})"

    def cap(self, part: Part) -> int | None:
        """The HBM a recipe's cap (xla_flags) left the compiler that refused `part`, less than the chip's; None
        otherwise. It names the HBM it had to 0.01G, so the chip's own may come back a few MB short."""
        under = part.refused_under
        return under if under is not None and under < self.limit - GIB // 100 else None

    def fixes(self, part: Part) -> str:
        """What to change for `part`."""
        if part.name == "vllm":
            share = self.result["vllm_share_bytes"]
            if share > self.limit:
                return "lower hbm_utilization_vllm: its share is more than the chip"
            shared = ", which takes room from the trainer," if self.result["shared_chips"] else ""
            return f"raise hbm_utilization_vllm{shared} or the rollout's tensor or expert parallelism"
        first = ("hbm_utilization_vllm, " if self.vllm_beside else "")
        if part.name == "placement":
            return f"lower {first}the optimizer's state (a smaller optimizer, or more trainer chips)"
        raise_cap = ", or raise the cap in rl.xla_flags (the margin must stay free)" if self.cap(part) else ""
        return f"lower {first}{', '.join(BATCH[:-1])} or {BATCH[-1]}{raise_cap}"

    def verdict(self, part: Part) -> str:
        """What a part holds, said against what it may hold."""
        if part.name == "vllm":
            return f"needs {part.shown} of its {gib(part.allowed)} share" + ("" if part.fits else ", too much")
        if part.fits:
            return f"{part.shown} at its peak"
        if (cap := self.cap(part)) is not None:
            return f"{part.shown} at its peak, more than its compiler is told a chip has ({gib(cap)})"
        if part.total is not None and part.total <= self.limit:
            return f"{part.shown} at its peak: {gib(self.limit - part.total)} free, under the {gib(self.margin)} margin"
        return f"{part.shown} at its peak, over the chip"

    def refusal(self, recipe: str) -> str:
        """One line: which part does not fit, its figure, the chip's limit and the setting to change."""
        part = next(part for part in self.parts if not part.fits)
        chip = self.result["accelerator"].split("-")[0]
        if part.name == "vllm":
            over = (f"needs {part.shown} of its {self.result['hbm_utilization_vllm']:g} share of a {chip} chip "
                    f"({gib(self.result['vllm_share_bytes'])})")
        else:  # the trainer's moments
            if (cap := self.cap(part)) is not None:
                need = (f"needs {part.shown}, more than the {gib(cap)} its compiler is told a "
                        f"{chip} chip has (rl.xla_flags {' '.join(self.flags)})")
            elif part.total is None:  # refused with no figure: only that it passes the chip
                need = f"needs more than a {chip} chip's {gib(self.limit)}"
            elif part.total > self.limit:
                need = f"needs {part.shown}, more than a {chip} chip's {gib(self.limit)}"
            else:
                need = (f"needs {part.shown} of a {chip} chip's {gib(self.limit)}, leaving less than the "
                        f"{round(100 * self.margin_share)}% margin ({gib(self.margin)})")
            over = f"{need}, on the {self.mesh()} of {self.result['accelerator']}"
        return f"{recipe} does not fit: {PART_NAMES[part.name]} {over}; {self.fixes(part)}"

    def summary(self) -> str:
        """One line for a plan that fits: its peak and what is left."""
        why = f"; {self.margin_why}" if self.margin_why else ""
        return (f"fits: {gib(self.known_peak)} of a {self.result['accelerator']} chip's {gib(self.limit)} at its peak "
                f"({PART_NAMES[self.largest.name]}), {100 * (self.limit - self.known_peak) / self.limit:.0f}% free "
                f"(the margin: {round(100 * self.margin_share)}%){why}")

    def record(self) -> dict:
        """What run.json keeps of it: the verdict, the peak, the chip's limit and who compiled it."""
        return {"fits": self.fits, "accelerator": self.result["accelerator"], "peak_bytes": self.peak,
                "limit_bytes": self.limit, "margin_bytes": self.margin, "headroom_bytes": self.headroom,
                "largest": self.largest.name, "compiler": self.result["versions"],
                **({"compiler_flags": list(self.flags)} if self.flags else {})}

    def rows(self) -> list[tuple[str, str]]:
        """The account, a row a part: what a person reads in `tpu-rl fit` and docs/fit.md."""
        rows = [("compiled for", f"{self.result['accelerator']}, {self.mesh()}"),
                *([("compiled with", " ".join(self.flags))] if self.flags else []),
                ("resident", f"{gib(self.resident)} (actor {gib(self.held['actor'])}, reference "
                             f"{gib(self.held['reference'])}, optimizer {gib(self.held['optimizer'])})")]
        share = gib(self.result["vllm_share_bytes"])
        if not self.with_vllm:
            rows.append(("vLLM", "none: the actor samples (the real-chip smoke's stand-in)"))
        elif self.result["shared_chips"]:
            rows.append(("vLLM", f"{share} of each shared chip, {gib(self.vllm_beside)} beside the models"))
        else:
            rows.append(("vLLM", f"{share} of each of its {self.result['sampler_chips']} own chips"))
        rows += [(PART_NAMES[part.name], self.verdict(part)) for part in self.parts]
        rows.append(("limit", f"{gib(self.limit)} a chip, the compiler's; margin {gib(self.margin)}"))
        return rows


def recipes_table(fits: dict[str, Fit]) -> str:
    """docs/fit.md's table, a row a recipe (tests/test_fit_account.py keeps the page equal to it)."""
    lines = ["| recipe | trainer chips | resident a chip | largest | vLLM's share | peak a chip | limit | margin | "
             "free | compiler |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, fit in fits.items():
        result, held = fit.result, fit.held
        resident = (f"{gib(fit.resident)} (actor {gib(held['actor'])}, reference {gib(held['reference'])}, "
                    f"optimizer {gib(held['optimizer'])})")
        peak = fit.known_peak
        largest = f"{PART_NAMES[fit.largest.name]}: +{gib(peak - fit.resident - fit.vllm_beside)}"
        share = f"{result['hbm_utilization_vllm']:g}: {gib(result['vllm_share_bytes'])}" + (
            " of the same chips" if result["shared_chips"] else f" of {result['sampler_chips']} own chips")
        free = f"{gib(fit.limit - peak)} ({100 * (fit.limit - peak) / fit.limit:.0f}%)"
        versions = result["versions"]
        compiler = f"JAX {versions['jax']}, libtpu {versions['libtpu']}"
        margin = f"{round(100 * fit.margin_share)}%" + ("" if fit.margin_share >= MARGIN else " (short)")
        lines.append(f"| `{name}` | {fit.mesh()} | {resident} | {largest} | {share} | {gib(peak)} | "
                     f"{gib(fit.limit)} | {margin} | {free} | {compiler} |")
    return "\n".join(lines)
