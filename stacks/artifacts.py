"""The `artifacts` stack: the bucket and the token secret that every recipe uses and none owns."""

from __future__ import annotations

from constructs import Construct

from tpu_rl.infra.secrets import TokenSecret, TokenSecretProps
from tpu_rl.infra.storage import ArtifactBucket, ArtifactBucketProps
from tpu_rl.recipes.conventions import ARTIFACTS_STACK
from tpu_rl.recipes.settings.load import Settings
from tpu_rl.stacks.base import TpuRlStack


class ArtifactsStack(TpuRlStack):
    def __init__(self, scope: Construct, settings: Settings) -> None:
        super().__init__(scope, ARTIFACTS_STACK, settings)
        ArtifactBucket(self, "artifacts", ArtifactBucketProps(name=settings.gcs_bucket, location=settings.region))
        TokenSecret(self, "hf-token", TokenSecretProps(secret_id=settings.hf_token_secret))
        self.output("bucket", settings.bucket_url, "Checkpoints, conversions and exports of every recipe")
        self.output("hf_token_secret", settings.hf_token_secret, "Secret Manager secret for the Hugging Face token")
        self.output(
            "add_token_command",
            f"gcloud secrets versions add {settings.hf_token_secret} --data-file=- --project={settings.project}",
            "Store the token (reads stdin; the value never passes through Terraform)",
        )
