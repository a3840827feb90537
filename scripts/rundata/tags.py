"""The TensorBoard tags `tpu-rl metrics` reads, and which way is better for each. One home, with the source.

train_rl writes them through tunix's MetricsLogger: `jax.monitoring.record_scalar(
f"{metrics_prefix}/{mode}/{metric_name}", value, step=step)` (tunix/sft/metrics_logger.py MetricsLogger.log at
google/tunix@c4ec573d, pinned by MaxText 0.2.4, and at @683256db, pinned by MaxText 0.2.3: each
wheel's dependencies/extra_deps/post_train_github_deps.txt). The listener is metrax's TensorboardBackend,
a tensorboardX SummaryWriter on `<base_output_directory>/<run_name>/tensorboard/` (metrax 0.2.3 and 0.2.4,
metrax/logging/tensorboard_backend.py; the directory from MaxText's types.py, RLConfig in 0.2.4,
MaxTextConfig in 0.2.3). The mode is always "train": MaxText calls `rl_trainer.train(train_dataset)`
without an eval set, so there are no */eval/* tags.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tag:
    name: str
    best: str | None  # "max", "min", or None where neither direction is better
    label: str  # the picture's panel title
    short: str = ""  # the row label of `metrics`' side-by-side table where `label` and "first" do not fit

    @property
    def row_label(self) -> str:
        return self.short or self.label


# Every tag below is written at both commits; paths and lines are those of c4ec573d (683256db in brackets).
REWARD_MEAN = Tag("rewards/train/mean", "max", "reward")
LOSS = Tag("actor/train/loss", "min", "loss")
KL = Tag("actor/train/kl", "min", "KL")
COMPLETION_LENGTH = Tag("completions/train/mean_length", None, "completion length", "mean tokens")

SUMMARY_TAGS: tuple[Tag, ...] = (
    # Per completion "sum" is the total reward over the reward functions, "mean" the total divided by their
    # number (MaxText's three by default), "min"/"max" likewise; the batch is then averaged, or its min/max taken
    # (tunix/rl/reward_manager.py _calculate_scalar_reward_log_metrics, both commits). The name splits at its
    # first "/" into prefix "rewards" and name "mean" (rl_cluster.py RLEngine._log_metrics [RLCluster._log_metrics]).
    REWARD_MEAN,
    Tag("rewards/train/sum", "max", "total reward"),
    Tag("rewards/train/min", "max", "lowest reward"),
    Tag("rewards/train/max", "max", "highest reward"),
    # The actor trainer, metrics_prefix "actor" (rl_cluster.py RLEngine._init_engine [RLCluster._init_cluster]):
    # tunix/sft/peft_trainer.py PeftTrainer._log_metrics (loss, learning_rate) and PeftTrainer.train (grad_norm);
    # kl from with_rl_metrics_to_log, tunix/rl/grpo/grpo_learner.py GRPOLearner.__init__.
    LOSS,
    KL,
    Tag("actor/train/learning_rate", None, "learning rate"),
    Tag("actor/train/grad_norm", None, "gradient norm"),
    # tokens per completion, averaged over the batch (grpo_learner.py GRPOLearner._generate_and_compute_advantage).
    COMPLETION_LENGTH,
)

# RLCluster logs a batch's rewards and completion lengths at its global step before the update
# (rl_cluster.py buffer_metrics; rl_learner.py train increments it after), the actor its loss at the step
# after it (peft_trainer.py _write_train_metrics). One train step a global step (MaxText's mini-batch is
# the batch, rl.num_iterations 1): reward step k is the batch train step k+1 trained on; the chip wrote
# rewards at 0..7 and the loss at 1..8 (tests/chip_run). docs/provenance.md has the rest.
ROLLOUT_PREFIXES = ("rewards/", "completions/")


def paired_step(tag: str, step: int) -> int:
    """The train step a point of `tag` belongs to: a rollout's the step that trained on it."""
    return step + 1 if tag.startswith(ROLLOUT_PREFIXES) else step


# The picture's 2x2 panels, in reading order.
PLOTTED_TAGS: tuple[Tag, ...] = (REWARD_MEAN, LOSS, KL, COMPLETION_LENGTH)

BY_NAME = {tag.name: tag for tag in SUMMARY_TAGS}
