"""The TensorBoard tags `tpu-rl metrics` reads, and which way is better for each. One home, with the source.

train_rl writes them through tunix's MetricsLogger: `jax.monitoring.record_scalar(
f"{metrics_prefix}/{mode}/{metric_name}", value, step=step)` (tunix/sft/metrics_logger.py, L282-284 at
google/tunix@c4ec573d, pinned by MaxText 0.2.4; L148-149 at @683256db, pinned by MaxText 0.2.3: each
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


# Every tag below is written at both commits; paths and lines are those of c4ec573d (683256db in brackets).
REWARD_MEAN = Tag("rewards/train/mean", "max", "reward")
LOSS = Tag("actor/train/loss", "min", "loss")
KL = Tag("actor/train/kl", "min", "KL")
COMPLETION_LENGTH = Tag("completions/train/mean_length", None, "completion length")

SUMMARY_TAGS: tuple[Tag, ...] = (
    # tunix/rl/reward_manager.py L31-42, L209-211 (same lines): per completion, over the reward functions,
    # "sum" is the total reward and "mean" the total divided by the number of functions (MaxText uses three:
    # match_format_exactly, match_format_approximately, check_numbers); "min"/"max" likewise per completion.
    # The batch is then averaged (sum, mean), or its min/max taken. The RLCluster splits the name at its
    # first "/" into prefix "rewards" and name "mean" (tunix/rl/rl_cluster.py L745-748 [L736-738]).
    REWARD_MEAN,
    Tag("rewards/train/sum", "max", "total reward"),
    Tag("rewards/train/min", "max", "lowest reward"),
    Tag("rewards/train/max", "max", "highest reward"),
    # The actor trainer, metrics_prefix "actor" (rl_cluster.py L575 [L565]): tunix/sft/peft_trainer.py
    # _log_metrics L712-732 [L465-485] (loss, learning_rate) and grad_norm L1011 [L716];
    # kl from with_rl_metrics_to_log, tunix/rl/grpo/grpo_learner.py L211-216 [L197-200].
    LOSS,
    KL,
    Tag("actor/train/learning_rate", None, "learning rate"),
    Tag("actor/train/grad_norm", None, "gradient norm"),
    # tunix/rl/grpo/grpo_learner.py L385-403 [L333-351]: tokens per completion, averaged over the batch.
    COMPLETION_LENGTH,
)

# The picture's 2x2 panels, in reading order.
PLOTTED_TAGS: tuple[Tag, ...] = (REWARD_MEAN, LOSS, KL, COMPLETION_LENGTH)

BY_NAME = {tag.name: tag for tag in SUMMARY_TAGS}
