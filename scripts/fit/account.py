"""The fit account: what one chip holds at a run's peak, from the compiled programs (maxtext_compile.py's
result) and vLLM's share, against the chip's limit with the margin.

A trainer chip holds the actor, the reference model and the optimizer state for the whole run, and one
program at a time beside them: the train step or the reference log-probs; the peak is the resident
state plus the largest program, not their sum. Where vLLM shares the chips (the VM recipe), its
weights and KV cache fill hbm_utilization_vllm of each chip beside the two models, and the optimizer
and the programs get the rest. On its own chips (Pathways) vLLM takes that share of the sampler chips.

The compiler judged each program beside a ballast of everything else plus the margin, so a program it
compiled fits with the margin; one it refused does not. vLLM's own programs cannot be compiled here:
its start is checked by the account of its weights and one max-length sequence of KV cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpu_rl.recipes import UserError

GIB = 1 << 30

# What to change when each part does not fit: the settings that size it.
BATCH = ("train_micro_batch_size", "rl.num_generations", "max_target_length")
VLLM = ("hbm_utilization_vllm", "rollout_tensor_parallelism")
PROGRAM_NAMES = {"train_step": "the train step", "reference_logps": "the reference log-probs",
                 "vllm": "vLLM's start"}


def laid_out(result: dict, recipe: str) -> None:
    """UserError when the run's parallelism cannot be laid out on its trainer chips (before any memory)."""
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
    """One program (or vLLM's start) on one chip: what the chip holds while it runs."""

    name: str
    fits: bool
    total: int | None  # bytes on the chip at the program's peak; None: more than the compiler said

    @property
    def shown(self) -> str:
        return gib(self.total) if self.total is not None else "more than the chip"


@dataclass(frozen=True)
class Fit:
    result: dict

    @property
    def limit(self) -> int:
        return self.result["limit_bytes"]

    @property
    def margin(self) -> int:
        return self.result["margin_bytes"]

    @property
    def held(self) -> dict:
        return self.result["held_bytes"]

    @property
    def resident(self) -> int:
        """The trainer chip's state for the whole run: both models and the optimizer."""
        return sum(self.held.values())

    @property
    def vllm_beside(self) -> int:
        """What vLLM holds on a trainer chip: its share less the two models, where it shares the chips."""
        if not self.result["shared_chips"] or not self.result["vllm_share_bytes"]:
            return 0
        return self.result["vllm_share_bytes"] - self.held["actor"] - self.held["reference"]

    def program(self, name: str) -> Part:
        compiled = self.result["programs"][name]
        if "refused" in compiled:
            need = compiled.get("need_bytes")
            # the compiler's need counts the ballast; the chip's peak counts what it stands for
            total = None if need is None else need - compiled["ballast_bytes"] + compiled["beside_bytes"]
            return Part(name, False, total)
        own = (compiled["argument_bytes"] + compiled["output_bytes"] - compiled["alias_bytes"]
               + compiled["temp_bytes"] + compiled["code_bytes"])
        return Part(name, True, own + compiled["beside_bytes"])

    @property
    def vllm_start(self) -> Part:
        """vLLM starts when its weights, what else the chip holds then and one max-length sequence of KV
        cache fit its share (tpu_inference determine_available_memory; vLLM's own KV-cache check)."""
        before = self.held["actor"] + self.held["reference"] if self.result["shared_chips"] else 0
        need = (before + self.result["vllm_weights_bytes"]
                + self.result["kv_bytes_per_token"] * self.result["max_model_len"])
        return Part("vllm", need <= self.result["vllm_share_bytes"], need)

    @property
    def parts(self) -> list[Part]:
        with_vllm = self.result.get("sampler", "vllm") == "vllm"  # "actor": the smoke samples with the actor
        return [*self.programs, *([self.vllm_start] if with_vllm else [])]

    @property
    def programs(self) -> list[Part]:
        return [self.program(name) for name in PROGRAM_NAMES if name in self.result["programs"]]

    @property
    def largest(self) -> Part:
        """The trainer program with the highest peak (an unknown peak is the highest)."""
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

    def mesh(self) -> str:
        axes = ", ".join(f"{name} {size}" for name, size in self.result["trainer_mesh"].items()) or "one chip"
        chips = self.result["trainer_chips"]
        return f"{chips} trainer chip{'s' if chips != 1 else ''} ({axes})"

    def fixes(self, part: Part) -> str:
        """The settings to change for `part`; beside a shared vLLM, a smaller share first."""
        names = VLLM if part.name == "vllm" else (VLLM[:1] if self.result["shared_chips"] else ()) + BATCH
        return f"{', '.join(names[:-1])} or {names[-1]}"

    def verdict(self, part: Part) -> str:
        """What a part holds, said against what it may hold."""
        if part.name == "vllm":
            return f"needs {part.shown} of its {gib(self.result['vllm_share_bytes'])} share" + ("" if part.fits else ", too much")
        if part.fits:
            return f"{part.shown} at its peak"
        if part.total is not None and part.total <= self.limit:
            return f"{part.shown} at its peak: {gib(self.limit - part.total)} free, under the {gib(self.margin)} margin"
        return f"{part.shown} at its peak, over the chip"

    def refusal(self, recipe: str) -> str:
        """One line: which part does not fit, its figure, the chip's limit and the setting to change."""
        part = next(part for part in self.parts if not part.fits)
        chip = self.result["accelerator"].split("-")[0]
        percent = round(100 * self.margin / self.limit)
        if part.name == "vllm":
            over = (f"needs {part.shown} of its {self.result['hbm_utilization_vllm']:g} share of a {chip} chip "
                    f"({gib(self.result['vllm_share_bytes'])})")
        else:
            over = (f"needs {part.shown} of a {chip} chip's {gib(self.limit)}, leaving less than the {percent}% "
                    f"margin ({gib(self.margin)}), on the {self.mesh()} of {self.result['accelerator']}")
        return f"{recipe} does not fit: {PROGRAM_NAMES[part.name]} {over}; lower {self.fixes(part)}"

    def summary(self) -> str:
        """One line for a plan that fits: the compiler's verdict, and the peak its memory analysis counts."""
        percent = round(100 * self.margin / self.limit)
        return (f"fits with the {percent}% margin: at most {gib(self.peak)} of a {self.result['accelerator']} "
                f"chip's {gib(self.limit)} at its peak ({PROGRAM_NAMES[self.largest.name]})")

    def record(self) -> dict:
        """What run.json keeps of it: the verdict, the peak, the chip's limit and who compiled it."""
        return {"fits": self.fits, "accelerator": self.result["accelerator"], "peak_bytes": self.peak,
                "limit_bytes": self.limit, "margin_bytes": self.margin, "headroom_bytes": self.headroom,
                "largest": self.largest.name, "compiler": self.result["versions"]}

    def rows(self) -> list[tuple[str, str]]:
        """The account, a row a part: what a person reads in `tpu-rl fit` and docs/fit.md."""
        shared = self.result["shared_chips"]
        rows = [("compiled for", f"{self.result['accelerator']}, {self.mesh()}"),
                ("resident", f"{gib(self.resident)} (actor {gib(self.held['actor'])}, reference "
                             f"{gib(self.held['reference'])}, optimizer {gib(self.held['optimizer'])})")]
        share = gib(self.result["vllm_share_bytes"])
        if self.result.get("sampler", "vllm") != "vllm":
            rows.append(("vLLM", "none: the actor samples (the real-chip smoke's stand-in)"))
        else:
            rows.append(("vLLM", f"{share} of each shared chip, {gib(self.vllm_beside)} beside the models" if shared
                         else f"{share} of each of its {self.result['sampler_chips']} own chips"))
        for part in self.parts:
            rows.append((PROGRAM_NAMES[part.name], self.verdict(part)))
        rows.append(("limit", f"{gib(self.limit)} a chip, the compiler's; margin {gib(self.margin)}"))
        return rows


def recipes_table(fits: dict[str, Fit]) -> str:
    """docs/fit.md's table, a row a recipe (tests/test_fit_account.py keeps the page equal to it)."""
    lines = ["| recipe | trainer chips | resident a chip | largest program | vLLM's share | peak a chip | limit | free | compiler |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, fit in fits.items():
        result, held = fit.result, fit.held
        resident = f"{gib(fit.resident)} (actor {gib(held['actor'])}, reference {gib(held['reference'])}, optimizer {gib(held['optimizer'])})"
        largest = f"{PROGRAM_NAMES[fit.largest.name]}: {gib(fit.peak - fit.resident - fit.vllm_beside)}"
        share = f"{result['hbm_utilization_vllm']:g}: {gib(result['vllm_share_bytes'])}" + (
            " of the same chips" if result["shared_chips"] else f" of {result['sampler_chips']} own chips")
        free = f"{gib(fit.headroom)} ({100 * fit.headroom / fit.limit:.0f}%)"
        versions = result["versions"]
        compiler = f"JAX {versions['jax']}, libtpu {versions['libtpu']}"
        lines.append(f"| `{name}` | {fit.mesh()} | {resident} | {largest} | {share} | {gib(fit.peak)} | "
                     f"{gib(fit.limit)} | {free} | {compiler} |")
    return "\n".join(lines)
