"""Can this Hugging Face token download the recipe's model? Three requests to the Hub, as the convert step
would make them, so a token that can never read the model fails before anything is deployed.

The Hub's answers, as huggingface/huggingface_hub v2.4.0 reads them (src/huggingface_hub/...):
- GET /api/whoami-v2 with `Authorization: Bearer <token>` (hf_api.py HfApi._inner_whoami): 200 and a JSON
  object whose "name" is the account (_login.py _validate_and_save_token reads "name" and
  "auth"."accessToken"."role"); 401 for a token the Hub does not know; another status (429, 5xx) says
  nothing about the token (_inner_whoami tells 401 apart from the rest).
- GET /api/models/{repo_id} (hf_api.py HfApi.model_info): the model's metadata, readable for a gated model
  too; "gated" is "auto", "manual" or false (hf_api.py ModelInfo), "cardData"."license" its licence.
- HEAD /{repo_id}/resolve/main/config.json (constants.py HUGGINGFACE_CO_URL_TEMPLATE), the file download:
  a gated model whose licence the account has not accepted answers 401/403 with the header
  `X-Error-Code: GatedRepo` and the reason in `X-Error-Message` (utils/_http.py hf_raise_for_status); a
  fine-grained token without access to the repo gets 403 with X-Error-Message and no X-Error-Code
  (tests/test_utils_errors.py test_hf_raise_for_status_403_wrong_token_scope).
A redirect to the same host (a renamed repo) is followed, at most MAX_REDIRECTS times, as utils/_http.py does.
HF_ENDPOINT (scripts/cloud/clients.py) moves every request to another host, as huggingface_hub honours it
(constants.py ENDPOINT).

The token goes only into the Authorization header: never into a URL, a message or an exception.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from email.message import Message
from typing import Callable, Mapping
from urllib.parse import urlsplit

from tpu_rl.recipes import UserError
from tpu_rl.scripts.cloud.foreign import clip

HUB = "https://huggingface.co"
TOKENS_PAGE = f"{HUB}/settings/tokens"
# Each request's bound; the first one the Hub does not answer ends the check (Unreachable).
TIMEOUT_SECONDS = 10
PROBE_FILE = "config.json"  # every model repo the recipes name has one; convert reads it first
MAX_REDIRECTS = 5


class Unreachable(Exception):
    """No answer from the Hub (connection refused, timeout, DNS): nothing is known about the token."""


class Unanswered(Unreachable):
    """The Hub answered whoami with neither the account nor 401 (429, 5xx): nothing is known about the token."""

    def __init__(self, status: int) -> None:
        super().__init__(f"the Hub answered HTTP {status}")


@dataclass(frozen=True)
class Access:
    """What the Hub says about a token and one model: `ok` False with `problem` (one line: what is wrong and
    how to fix it) when the token cannot download it."""

    ok: bool
    detail: str  # what was found (ok) or the problem and its fix


class _SameHostRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect on the same host (a renamed repo) is followed; one to another host (a file on the CDN)
    already says the file is readable, and following it would send the Authorization header there."""

    max_redirections = MAX_REDIRECTS

    def redirect_request(self, request, fp, code, msg, headers, newurl):
        if urlsplit(newurl)[:2] != urlsplit(request.full_url)[:2]:
            return None
        return super().redirect_request(request, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_SameHostRedirect)


@dataclass(frozen=True)
class _Answer:
    status: int
    body: bytes
    headers: Message | Mapping[str, str]  # urllib's (an email Message), or a plain table


def _request(method: str, url: str, token: str) -> _Answer:
    request = urllib.request.Request(url, method=method, headers={"Authorization": f"Bearer {token}"})
    try:
        with _OPENER.open(request, timeout=TIMEOUT_SECONDS) as response:
            return _Answer(response.status, response.read() if method != "HEAD" else b"", response.headers)
    except urllib.error.HTTPError as error:
        return _Answer(error.code, error.read() or b"", error.headers)
    except (urllib.error.URLError, OSError) as error:  # refused, timed out, no such host
        reason = getattr(error, "reason", error)
        raise Unreachable(clip(str(reason), 80)) from None


def _json(answer: _Answer) -> dict:
    try:
        value = json.loads(answer.body)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _hub_reason(answer: _Answer) -> str:
    """The Hub's own reason for a refusal (X-Error-Message, or the JSON body's "error"), cut to a line."""
    reason = answer.headers.get("X-Error-Message") or str(_json(answer).get("error") or "")
    return f"HTTP {answer.status}" + (f" {clip(reason, 160)}" if reason else "")


def account(token: str, endpoint: str) -> str | None:
    """The account the token belongs to, or None when the Hub refuses it (401); Unreachable without an
    answer, Unanswered for another status (429, 5xx)."""
    answer = _request("GET", f"{endpoint}/api/whoami-v2", token)
    if answer.status == 200:
        return str(_json(answer).get("name") or "an unnamed account")
    if answer.status == 401:
        return None
    raise Unanswered(answer.status)


def refused_token(endpoint: str) -> str:
    return (f"the Hugging Face Hub ({endpoint}) does not accept this token (whoami-v2 answered 401): create a "
            f"read token at {TOKENS_PAGE} and store it with `tpu-rl secret set < token-file`")


def check(token: str, repo_ids: list[str], endpoint: str | None) -> tuple[str | None, list[Access]]:
    """The token's account (None when the Hub refuses the token, with no model asked about) and its access
    to each model; Unreachable when the Hub (`endpoint`, or huggingface.co) does not answer."""
    endpoint = (endpoint or HUB).rstrip("/")
    name = account(token, endpoint)
    if name is None:
        return None, []
    return name, [model_access(token, repo_id, endpoint, name) for repo_id in repo_ids]


def model_access(token: str, repo_id: str, endpoint: str, name: str) -> Access:
    """Whether the token of account `name` can download `repo_id` (the file the convert step reads first)."""
    page = f"{HUB}/{repo_id}"
    info = _request("GET", f"{endpoint}/api/models/{repo_id}", token)
    if info.status != 200:
        return Access(False, f"the Hub does not show model {repo_id} to {name} ({_hub_reason(info)}): check "
                      f"{page} exists and the token may read it")
    facts = _json(info)
    gated = facts.get("gated") or False
    licence = (facts.get("cardData") or {}).get("license") if isinstance(facts.get("cardData"), dict) else None
    probe = _request("HEAD", f"{endpoint}/{repo_id}/resolve/main/{PROBE_FILE}", token)
    if probe.status < 400:
        kind = f"gated ({gated}), its licence accepted" if gated else "not gated"
        return Access(True, f"{name} can read {repo_id} ({kind})")
    if probe.headers.get("X-Error-Code") == "GatedRepo":
        what = f"the {licence} licence" if licence else "its licence"
        return Access(False, f"{name} may not download {repo_id}, a gated model: accept {what} at {page} "
                      f"(signed in as {name}; '{gated}' approval), then run this again")
    return Access(False, f"{name} cannot download {repo_id}'s {PROBE_FILE} ({_hub_reason(probe)}): give the "
                  f"token read access to it at {TOKENS_PAGE}")


def before_storing(token: str, repo_ids: list[str], endpoint: str | None, say: Callable[[str], None]) -> None:
    """What `tpu-rl secret set` checks, and says, before it stores a token: UserError when the Hub refuses
    it (401: nothing is stored); a warning for each model it cannot download (another recipe may not need
    it); one warning when the Hub does not answer or answers another status (stored unchecked: preflight
    asks again)."""
    where = (endpoint or HUB).rstrip("/")
    say(f"asking the Hugging Face Hub whether the token can read the recipes' models, {TIMEOUT_SECONDS} s "
        "at most per request")
    try:
        name, accesses = check(token, repo_ids, endpoint)
    except Unreachable as error:
        what = f"{error} ({where})" if isinstance(error, Unanswered) else f"the Hub ({where}) did not answer ({error})"
        say(f"warning: {what}: the token is stored unchecked; `tpu-rl preflight RECIPE` checks it")
        return
    if name is None:
        raise UserError(f"{refused_token(where)}; nothing was stored")
    for line in [f"warning: {access.detail}" for access in accesses if not access.ok] or [
            f"the token of {name} can read every recipe's model ({', '.join(repo_ids)})"]:
        say(line)
