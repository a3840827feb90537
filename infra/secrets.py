"""A Secret Manager secret for the Hugging Face token, without a value.

The value never passes through Terraform (config or state): it is added out of band with
`gcloud secrets versions add` or `tpu-rl secret set`, both reading stdin.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from constructs import Construct

from tpu_rl.infra.google import secret_manager_secret


@dataclass(frozen=True)
class TokenSecretProps:
    secret_id: str
    labels: dict[str, str] = field(default_factory=dict)


class TokenSecret(Construct):
    def __init__(self, scope: Construct, id: str, props: TokenSecretProps) -> None:
        super().__init__(scope, id)
        self.secret = secret_manager_secret.SecretManagerSecret(
            self,
            "secret",
            secret_id=props.secret_id,
            replication=secret_manager_secret.SecretManagerSecretReplication(
                auto=secret_manager_secret.SecretManagerSecretReplicationAuto()
            ),
            labels=props.labels or None,
        )
