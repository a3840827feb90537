"""The Hugging Face Hub, just the three requests `tpu-rl` makes (scripts/cloud/hf_hub.py), with the Hub's
answers as huggingface/huggingface_hub v2.4.0 reads them (paths under src/huggingface_hub/):

- GET /api/whoami-v2: the account as JSON; hf_api.py HfApi._inner_whoami sends the bearer token, and
  _login.py _validate_and_save_token reads "name" and "auth"."accessToken"."role"/"displayName". A token the
  Hub does not know: 401 with "Invalid credentials in Authorization header" (the message utils/_http.py
  hf_raise_for_status tells apart from a missing repo), as X-Error-Message and as the JSON "error"
  (_format reads {"error": "..."}).
- GET /api/models/{repo_id}: hf_api.py HfApi.model_info -> ModelInfo(**data): "id", "author", "private",
  "disabled", "gated" ("auto" | "manual" | false), "cardData" (its "license"), "tags". A missing repo: 404
  with `X-Error-Code: RepoNotFound` (hf_raise_for_status).
- HEAD /{repo_id}/resolve/main/{file} (constants.py HUGGINGFACE_CO_URL_TEMPLATE): 200 with ETag and
  X-Repo-Commit (file_download.py reads both); a gated repo whose licence the account has not accepted
  answers 403, or 401 without a token, with `X-Error-Code: GatedRepo` and the reason in X-Error-Message
  (hf_raise_for_status raises GatedRepoError on that code). A fine-grained token without access to the
  repo: 403 with X-Error-Message and no X-Error-Code (tests/test_utils_errors.py
  test_hf_raise_for_status_403_wrong_token_scope, whose message "specific error message" the peer sends).
- A renamed repo: a redirect on the same host to the new name, which utils/_http.py follows.

Which recipe models are gated, and their licences: Llama 3.1 (llama3.1, manual approval) is gated, Qwen3
(apache-2.0) is not. Gemma 4 is Apache 2.0 by third-party pages (https://www.llmradar.eu/models/gemma-4-26b-a4b-it,
https://apxml.com/models/gemma-4-26b-a4b, read 2026-12); no source read shows its model page gated (its
card was not reachable), so the peer serves it ungated; earlier Gemma generations were gated (license: gemma,
https://huggingface.co/google/gemma-3n-E2B).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field

from peers.http import PeerServer, Reply

ACCOUNT = "tester"  # the account of the token start_hub is given
INVALID = "Invalid credentials in Authorization header"
# repo id -> (gated, licence) of the models the recipes name (recipes.toml [recipes.*.model] hf_repo).
MODELS = {
    "Qwen/Qwen3-30B-A3B-Instruct-2507": (False, "apache-2.0"),
    "google/gemma-4-26b-a4b-it": (False, "apache-2.0"),
    "meta-llama/Llama-3.1-8B-Instruct": ("manual", "llama3.1"),
}
_MODEL = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)$")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<file>.+)$")


@dataclass
class HubApi(PeerServer):
    tokens: dict = field(default_factory=dict)  # token -> account name
    accepted: set = field(default_factory=set)  # (account, repo id): licences accepted
    models: dict = field(default_factory=lambda: dict(MODELS))
    scoped: set = field(default_factory=set)  # accounts whose fine-grained token may read no gated repo
    renamed: dict = field(default_factory=dict)  # old repo id -> new one (answered with a same-host 307)

    def __post_init__(self) -> None:
        super().__init__()
        self._bearer = threading.local()
        self.bearers: list[str] = []  # every Authorization header's token, in order

    def authorized(self, headers) -> bool:
        value = headers.get("Authorization") or ""
        token = value.removeprefix("Bearer ") if value.startswith("Bearer ") else None
        self._bearer.token = token
        self.bearers.append(token or "")
        return True

    def error_body(self, status: int) -> object:
        return {"error": f"injected {status}"}

    @staticmethod
    def error(status: int, message: str, code: str | None = None) -> Reply:
        headers = {"X-Error-Message": message, **({"X-Error-Code": code} if code else {})}
        return Reply(status, {"error": message}, headers)

    def route(self, method: str, path: str, query: dict, body: bytes) -> Reply:
        token = getattr(self._bearer, "token", None)
        name = self.tokens.get(token) if token else None
        if token and name is None:
            return self.error(401, INVALID)
        if path == "/api/whoami-v2":
            if name is None:
                return self.error(401, INVALID)
            return Reply(200, {"type": "user", "id": f"id-{name}", "name": name, "fullname": name.title(),
                               "orgs": [], "auth": {"type": "access_token",
                                                    "accessToken": {"displayName": "tpu-rl", "role": "read"}}})
        match = _MODEL.match(path) or _RESOLVE.match(path)
        repo = match["repo"] if match else None
        if repo in self.renamed:
            return Reply(307, "", {"Location": path.replace(repo, self.renamed[repo], 1)})
        if repo not in self.models:
            return self.error(404, "Repository not found", "RepoNotFound")
        gated, licence = self.models[repo]
        if path.startswith("/api/models/"):
            return Reply(200, {"_id": f"id-{repo}", "id": repo, "modelId": repo, "author": repo.split("/")[0],
                               "private": False, "disabled": False, "gated": gated,
                               "cardData": {"license": licence}, "tags": [f"license:{licence}"]})
        if gated and name in self.scoped:
            return self.error(403, "specific error message")
        if gated and (name, repo) not in self.accepted:
            if name is None:
                return self.error(401, f"Access to model {repo} is restricted. You must have access to it and be "
                                  "authenticated to access it. Please log in.", "GatedRepo")
            return self.error(403, f"Access to model {repo} is restricted and you are not in the authorized list. "
                              f"Visit https://huggingface.co/{repo} to ask for access.", "GatedRepo")
        return Reply(200, "", {"ETag": '"0123abcd"', "X-Repo-Commit": "0" * 40})


def start_hub(token: str, state: dict | None = None) -> HubApi:
    """The Hub with the token's account, which has accepted every gated model's licence, changed where
    `state` says: hub_token (refused: the Hub does not know the token), licences (not-accepted)."""
    state = state or {}
    server = HubApi().start()
    if state.get("hub_token") != "refused":
        server.tokens[token] = ACCOUNT
    if state.get("licences") != "not-accepted":
        server.accepted.update((ACCOUNT, repo) for repo in MODELS)
    return server
