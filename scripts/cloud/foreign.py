"""The cloud libraries' own exceptions, past our own handling, as the outcomes they are (recipes/outcome.py):
classified by type, looked up without importing any library.
"""

from __future__ import annotations

import sys
from typing import Callable

from tpu_rl.recipes.outcome import ApiError, CredentialsRefused, Outcome

_KUBE_API_EXCEPTION = ("kubernetes.client.exceptions", "ApiException")


def _is_a(error: BaseException, module_name: str, class_name: str) -> bool:
    """isinstance against a library's class, looked up only in a module that is already imported: an
    exception cannot be an instance of a class that was never loaded, and importing the kubernetes and
    Google clients here would cost every command (`--help`, `recipes`, `render`) their start-up."""
    cls = getattr(sys.modules.get(module_name), class_name, None)
    return cls is not None and isinstance(error, cls)


def clip(text: str, limit: int) -> str:
    """`text` on one line in at most about `limit` characters, cut at a space and marked with "…", never
    mid-word (a URL or an endpoint stays whole or goes)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return (text[:cut] if cut > 0 else text.split(" ")[0]).rstrip(" ,;:(") + " …"


def describe(error: BaseException) -> str:
    """A library's exception in a few words: a Kubernetes API error as its HTTP status, others by type."""
    if _is_a(error, *_KUBE_API_EXCEPTION):
        # Known by name, so that kubernetes is imported only where it is used: its attributes read as such.
        return f"HTTP {getattr(error, 'status', '')} {getattr(error, 'reason', None) or ''}".strip()
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {clip(text, 160)}" if text else type(error).__name__


def _text(error: BaseException) -> str:
    return f"{type(error).__name__}: {clip(str(error), 200)}"


def _refused_credentials(error: BaseException) -> Outcome:
    cause = "Google did not accept your credentials"
    return CredentialsRefused(f"{cause} ({describe(error)}): run `gcloud auth application-default login`",
                              cause=f"{cause} ({type(error).__name__})")


# Exceptions the cloud libraries raise past our own handling, tried in this order: (module, class, the outcome).
_FOREIGN: tuple[tuple[str, str, Callable[[BaseException], Outcome]], ...] = (
    (*_KUBE_API_EXCEPTION, lambda error: ApiError(f"Kubernetes API error: {describe(error)}")),
    ("google.api_core.exceptions", "GoogleAPIError", lambda error: ApiError(f"Google API error: {_text(error)}")),
    # e.g. RefreshError: the stored login expired or was revoked
    ("google.auth.exceptions", "GoogleAuthError", _refused_credentials),
    # the REST clients (Compute, and any redirected API) could not connect
    ("requests", "RequestException", lambda error: ApiError(
        f"cannot reach a Google API ({describe(error)}): check the network and run the command again")),
    # a followed log stream broke midway (requests are retried in tpu_rl.scripts.cloud.retry)
    ("urllib3.exceptions", "HTTPError", lambda error: ApiError(
        f"lost the connection to the cluster ({describe(error)}): run the command again")),
)


def foreign_outcome(error: BaseException) -> Outcome | None:
    """The outcome of a cloud library's exception, or None when it is none of them."""
    for module_name, class_name, outcome in _FOREIGN:
        if _is_a(error, module_name, class_name):
            return outcome(error)
    return None
