"""The artifacts bucket: checkpoints, conversions and exports that must outlive any cluster or VM."""

from __future__ import annotations

from dataclasses import dataclass, field

from constructs import Construct

from tpu_rl.infra.google import storage_bucket

SEVEN_DAYS = 7 * 24 * 3600


@dataclass(frozen=True)
class ArtifactBucketProps:
    name: str
    location: str
    # Safe defaults: nothing public, nothing deleted by `destroy`, deleted or overwritten objects recoverable
    # for a week. One protection, soft delete (GCS's default, 7 days), which keeps both deleted and
    # overwritten objects; versioning on top kept each deleted checkpoint a week as a noncurrent version and
    # then a week soft-deleted, billed all along (docs/security.md, "Deleted checkpoints").
    versioning: bool = False
    soft_delete_seconds: int = SEVEN_DAYS
    # Expires the noncurrent versions a bucket made while it had versioning on (and any made if it is
    # turned on again); a bucket without versioning makes none.
    noncurrent_version_days: int = 7
    labels: dict[str, str] = field(default_factory=dict)


class ArtifactBucket(Construct):
    def __init__(self, scope: Construct, id: str, props: ArtifactBucketProps) -> None:
        super().__init__(scope, id)
        self.bucket = storage_bucket.StorageBucket(
            self,
            "bucket",
            name=props.name,
            location=props.location.upper(),
            storage_class="STANDARD",
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            force_destroy=False,  # destroying the stack never deletes trained weights
            versioning=storage_bucket.StorageBucketVersioning(enabled=props.versioning),
            soft_delete_policy=storage_bucket.StorageBucketSoftDeletePolicy(
                retention_duration_seconds=props.soft_delete_seconds
            ),
            lifecycle_rule=[
                storage_bucket.StorageBucketLifecycleRule(
                    action=storage_bucket.StorageBucketLifecycleRuleAction(type="Delete"),
                    condition=storage_bucket.StorageBucketLifecycleRuleCondition(
                        days_since_noncurrent_time=props.noncurrent_version_days, with_state="ARCHIVED"
                    ),
                )
            ],
            labels=props.labels or None,
        )
