"""The Hugging Face token's only path: stdin -> Secret Manager -> Kubernetes Secret -> container env.

It never passes through Terraform, argv, manifests or our output. Functions here return or accept the
token but never format it into a message.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from google.api_core import exceptions as gexc

from tpu_rl.recipes import Settings, UserError
from tpu_rl.recipes.outcome import ApiError

if TYPE_CHECKING:
    from tpu_rl.scripts.cloud.clients import Clients


def secret_path(settings: Settings) -> str:
    return f"projects/{settings.project}/secrets/{settings.hf_token_secret}"


def _missing_secret(settings: Settings) -> UserError:
    return UserError(
        f"Secret Manager secret '{settings.hf_token_secret}' does not exist in project {settings.project}: "
        "deploy the artifacts stack first (`npx cdktf deploy artifacts`), or set HF_TOKEN_SECRET"
    )


def no_version_fix(settings: Settings) -> str:
    return f"add one with `tpu-rl secret set < token-file` (secret '{settings.hf_token_secret}')"


# A Hugging Face user access token is hf_ and 34 letters today (gitleaks/gitleaks@7c56229a
# cmd/generate/config/rules/huggingface.go, rule huggingface-access-token: `hf_[a-zA-Z]{34}`; the Hub's own
# page, huggingface.co/docs/hub/security-tokens, gives no format). Digits and a length from 20 to
# MAX_TOKEN_CHARS are let through, so a token of a later format still passes; what is refused is no token
# at all: another service's key, a file piped by mistake (a 13-million-character one was once stored).
TOKEN_SHAPE = re.compile(r"hf_[A-Za-z0-9]{20,}\Z")
MAX_TOKEN_CHARS = 256
TOKEN_READ_CHARS = 4 * MAX_TOKEN_CHARS  # what `secret set` reads of stdin: a longer input is refused unread
_WHERE = ("copy a token from https://huggingface.co/settings/tokens and pipe it in, e.g. "
          "`tpu-rl secret set < ~/.hf-token`")


def clean_token(raw: str) -> str:
    """The token on stdin, checked for shape and length before anything is sent or stored; a refusal names
    only its length and whether it starts with hf_, never any of it."""
    token = raw.strip()
    if not token:
        raise UserError("no token on stdin: pipe it in, e.g. `tpu-rl secret set < ~/.hf-token`")
    if len(token) > MAX_TOKEN_CHARS:
        count = f"over {TOKEN_READ_CHARS}" if len(raw) >= TOKEN_READ_CHARS else str(len(token))
        raise UserError(f"the token on stdin has {count} characters, over the {MAX_TOKEN_CHARS} a Hugging Face "
                        f"token fits in (hf_ and 34 letters today): {_WHERE}")
    if any(ch.isspace() for ch in token):
        raise UserError("the token on stdin contains whitespace inside it: give exactly one token")
    if not TOKEN_SHAPE.match(token):
        rest = token[3:]
        why = ("does not start with hf_" if not token.startswith("hf_") else "is too short"
               if rest.isascii() and rest.isalnum() else "has a character other than a letter or digit after hf_")
        raise UserError(f"the token on stdin ({len(token)} characters) {why}, so it is no Hugging Face access token "
                        f"(hf_ and 34 letters today): {_WHERE}")
    return token


def _secret_manager(settings: Settings) -> str:
    """What a bounded Secret Manager call is said to reach (tpu_rl.scripts.cloud.reach)."""
    return f"Secret Manager for secret '{settings.hf_token_secret}'"


def add_version(clients: Clients, settings: Settings, token: str) -> str:
    """Add the token as a new enabled version; returns the version's resource name."""
    from google_crc32c import value as crc32c

    data = token.encode()
    request = {"parent": secret_path(settings), "payload": {"data": data, "data_crc32c": crc32c(data)}}
    try:
        version = clients.within(_secret_manager(settings), "secretmanager",
                                 lambda timeout: clients.secrets().add_secret_version(request=request, timeout=timeout))
    except gexc.NotFound:
        raise _missing_secret(settings) from None
    except (gexc.PermissionDenied, gexc.Forbidden):
        raise UserError(f"permission denied adding a version to '{settings.hf_token_secret}': you need "
                        "roles/secretmanager.secretVersionAdder on it") from None
    except gexc.GoogleAPIError as error:
        raise ApiError(f"adding a version to secret '{settings.hf_token_secret}' failed: {type(error).__name__}") from None
    return version.name


def versions_denied(settings: Settings) -> UserError:
    """Listing versions (secretmanager.versions.list) and reading one's state (versions.get) need
    roles/secretmanager.viewer; roles/secretmanager.secretAccessor grants only versions.access, the payload
    (IAM docs, iam/docs/roles-permissions/secretmanager; secret-manager/docs/view-secret-version)."""
    return UserError(f"permission denied reading the versions of secret '{settings.hf_token_secret}' (project "
                     f"{settings.project}): checking its latest version needs roles/secretmanager.viewer on it "
                     "(secretAccessor reads only the payload)")


def enabled_versions(clients: Clients, settings: Settings) -> list[str]:
    request = {"parent": secret_path(settings)}
    try:
        return clients.within(_secret_manager(settings), "secretmanager", lambda timeout: [
            v.name for v in clients.secrets().list_secret_versions(request=request, timeout=timeout)
            if v.state.name == "ENABLED"])
    except gexc.NotFound:
        raise _missing_secret(settings) from None
    except (gexc.PermissionDenied, gexc.Forbidden):
        raise versions_denied(settings) from None


def latest_version(clients: Clients, settings: Settings):
    """The latest version's metadata (its state; never the payload)."""
    request = {"name": f"{secret_path(settings)}/versions/latest"}
    return clients.within(_secret_manager(settings), "secretmanager",
                          lambda timeout: clients.secrets().get_secret_version(request=request, timeout=timeout))


def read_token(clients: Clients, settings: Settings) -> str:
    """The latest enabled version's payload. Only `run` calls this, to fill the Kubernetes Secret."""
    request = {"name": f"{secret_path(settings)}/versions/latest"}
    try:
        response = clients.within(_secret_manager(settings), "secretmanager",
                                  lambda timeout: clients.secrets().access_secret_version(request=request,
                                                                                          timeout=timeout))
    except gexc.NotFound:
        if not enabled_versions(clients, settings):
            raise UserError(f"secret '{settings.hf_token_secret}' has no enabled version: "
                            f"{no_version_fix(settings)}") from None
        raise
    except (gexc.FailedPrecondition, gexc.BadRequest):  # latest disabled/destroyed (gRPC / REST status)
        raise UserError(f"the latest version of secret '{settings.hf_token_secret}' is disabled: "
                        f"{no_version_fix(settings)}") from None
    except (gexc.PermissionDenied, gexc.Forbidden):
        raise UserError(f"permission denied reading secret '{settings.hf_token_secret}': you need "
                        "roles/secretmanager.secretAccessor on it") from None
    return response.payload.data.decode()
