"""`tpu-rl secret set`: the token goes from stdin to a new Secret Manager version and nowhere else."""

from __future__ import annotations

import base64
import json
import os
import subprocess

import pytest
from typer.testing import CliRunner

from peers.fixtures import REPO, VENV_BIN, _free_port
from peers.hf_hub import ACCOUNT, MODELS
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app
from tpu_rl.scripts.cli.core import SECRET_AS_ARGUMENT

runner = CliRunner()
NEW_TOKEN = "hf_NEWsentinel987654321"
LLAMA, GEMMA = "meta-llama/Llama-3.1-8B-Instruct", "google/gemma-4-26b-a4b-it"


@pytest.fixture(autouse=True)
def _hub_knows_the_new_token(hub):
    hub.tokens[NEW_TOKEN] = ACCOUNT


def test_secret_set_reads_stdin_and_adds_an_enabled_version(settings_env, google):
    result = runner.invoke(app, ["secret", "set"], input=NEW_TOKEN + "\n")
    assert result.exit_code == 0, result.output
    versions = google.secrets["hf-token"]
    assert len(versions) == 2 and versions[-1] == {"data": NEW_TOKEN.encode(), "state": "ENABLED"}
    assert "added projects/tpu-rl-test/secrets/hf-token/versions/2" in result.output
    assert NEW_TOKEN not in result.output


def test_secret_set_sends_a_checksum_and_never_puts_the_token_in_the_url(settings_env, google):
    assert runner.invoke(app, ["secret", "set"], input=NEW_TOKEN).exit_code == 0
    [(method, path, body)] = [r for r in google.requests if ":addVersion" in r[1]]
    payload = json.loads(body)["payload"]
    assert base64.b64decode(payload["data"]).decode() == NEW_TOKEN and payload["dataCrc32c"]
    assert NEW_TOKEN not in path


def test_secret_set_honours_hf_token_secret(settings_env, google, monkeypatch):
    monkeypatch.setenv("HF_TOKEN_SECRET", "team-hf")
    google.secrets["team-hf"] = []
    assert runner.invoke(app, ["secret", "set"], input=NEW_TOKEN).exit_code == 0
    assert google.secrets["team-hf"][0]["data"] == NEW_TOKEN.encode()


def test_secret_set_without_the_secret_points_to_the_artifacts_stack(settings_env, google):
    google.secrets.clear()
    result = runner.invoke(app, ["secret", "set"], input=NEW_TOKEN)
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "does not exist" in result.output and "artifacts" in result.output


def test_secret_set_rejects_two_tokens(settings_env, google):
    result = runner.invoke(app, ["secret", "set"], input="hf_a hf_b")
    assert result.exit_code == ExitCode.BAD_INPUT and "whitespace" in result.output
    assert "hf_a" not in result.output


@pytest.mark.parametrize("given, why", [
    ("ghp_" + "a" * 36, "does not start with hf_"),  # another service's token
    ("hf_" + "a" * 10, "is too short"),
    ("hf_" + "a" * 20 + "-" + "b" * 13, "has a character other than a letter or digit after hf_"),
    ("hf_" + "a" * 300, "has 303 characters, over the 256"),
    ("hf_" + "a" * 13_000_000, "has over 1024 characters, over the 256"),  # a file piped by mistake, read no further
])
def test_a_token_of_the_wrong_shape_or_length_is_refused_before_anything_is_sent_or_stored(settings_env, google, hub,
                                                                                              given, why):
    # issue 37: a 13-million-character "token" was stored unchecked; nothing asked of the Hub or Secret Manager.
    versions = list(google.secrets["hf-token"])
    result = runner.invoke(app, ["secret", "set"], input=given + "\n")
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    [line] = result.output.splitlines()
    assert why in line and "huggingface.co/settings/tokens" in line, line
    assert given[:12] not in line  # never any of it
    assert google.secrets["hf-token"] == versions and not google.requests and not hub.requests


def test_secret_set_takes_no_token_argument(settings_env, google):
    result = runner.invoke(app, ["secret", "set", NEW_TOKEN])
    assert result.exit_code == 2 and len(google.secrets["hf-token"]) == 1


def test_a_token_argument_is_never_echoed_under_any_program_name(settings_env, tmp_path):
    # Before, the argument was masked only when the program path read "tpu-rl secret set": through
    # `python -m tpu_rl.scripts.cli` a token without the hf_ prefix came back in the usage error.
    plain = "abcdef0123456789sentinel"
    result = subprocess.run([str(VENV_BIN / "python"), "-m", "tpu_rl.scripts.cli", "secret", "set", plain],
                            capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert result.returncode == ExitCode.BAD_INPUT, result.stderr
    assert plain not in result.stdout + result.stderr
    assert result.stderr == f"error: {SECRET_AS_ARGUMENT}\n"


# -- the same question preflight asks the Hugging Face Hub (tests/peers/hf_hub.py) --------------------
def test_a_token_the_hub_does_not_accept_is_refused_and_not_stored(settings_env, google, hub):
    unknown = "hf_UNKNOWNsentinel24680"  # as good as today's `printf 'abc' | tpu-rl secret set`
    result = runner.invoke(app, ["secret", "set"], input=unknown)
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert "does not accept this token" in result.output and "nothing was stored" in result.output
    assert len(google.secrets["hf-token"]) == 1 and unknown not in result.output
    assert hub.bearers == [unknown] and all(unknown not in path for _, path, _ in hub.requests)


def test_each_gated_model_the_token_cannot_read_is_one_warning_naming_its_licence(settings_env, google, hub):
    hub.accepted.clear()
    result = runner.invoke(app, ["secret", "set"], input=NEW_TOKEN)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1, result.output  # Gemma 4 is not gated (tests/peers/hf_hub.py)
    assert f"accept the llama3.1 licence at https://huggingface.co/{LLAMA}" in warnings[0]
    assert google.secrets["hf-token"][-1]["data"] == NEW_TOKEN.encode()


def test_a_token_that_reads_every_model_says_so(settings_env, google, hub):
    result = runner.invoke(app, ["secret", "set"], input=NEW_TOKEN)
    assert result.exit_code == 0, result.output
    assert f"the token of {ACCOUNT} can read every recipe's model" in " ".join(result.output.split())
    assert not any(line.startswith("warning") for line in result.output.splitlines())
    assert {path for _, path, _ in hub.requests} >= {f"/api/models/{repo}" for repo in MODELS}


def test_an_unreachable_hub_is_one_warning_and_the_token_is_stored(settings_env, google, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_free_port()}")  # nothing listens there
    result = runner.invoke(app, ["secret", "set"], input=NEW_TOKEN)
    assert result.exit_code == 0, result.output
    [warning] = [line for line in result.output.splitlines() if line.startswith("warning")]
    assert warning.startswith("warning: the Hub (http://127.0.0.1:") and "did not answer" in warning
    assert "stored unchecked" in result.output and len(google.secrets["hf-token"]) == 2


@pytest.mark.parametrize("status", [429, 500, 503])
def test_a_whoami_answer_other_than_401_is_a_warning_and_the_token_is_stored(settings_env, google, hub, status):
    """Only 401 means the Hub refuses the token (huggingface_hub hf_api.py _inner_whoami); a rate limit or
    a server error says nothing about it."""
    from peers.http import Fault

    hub.faults.append(Fault("GET", "/api/whoami-v2", status))
    result = runner.invoke(app, ["secret", "set"], input=NEW_TOKEN)
    assert result.exit_code == 0, result.output
    [warning] = [line for line in result.output.splitlines() if line.startswith("warning")]
    assert warning.startswith(f"warning: the Hub answered HTTP {status} ({hub.url})"), warning
    assert "does not accept" not in result.output and "stored unchecked" in warning
    assert google.secrets["hf-token"][-1]["data"] == NEW_TOKEN.encode()


def test_a_fine_grained_token_without_gated_access_is_not_told_to_accept_a_licence(settings_env, google, hub):
    """403 without X-Error-Code GatedRepo (huggingface_hub tests/test_utils_errors.py
    test_hf_raise_for_status_403_wrong_token_scope): the token's scope, not the licence."""
    hub.scoped.add(ACCOUNT)
    result = runner.invoke(app, ["secret", "set"], input=NEW_TOKEN)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "licence" not in text
    assert f"{ACCOUNT} cannot download {LLAMA}'s config.json (HTTP 403 specific error message): give the token " \
           "read access to it at https://huggingface.co/settings/tokens" in text


def test_a_renamed_repo_is_followed_on_the_same_host(settings_env, google, hub):
    renamed = "google/gemma-renamed"
    hub.models[renamed] = hub.models.pop(GEMMA)
    hub.renamed[GEMMA] = renamed
    hub.accepted.add((ACCOUNT, renamed))
    result = runner.invoke(app, ["secret", "set"], input=NEW_TOKEN)
    assert result.exit_code == 0, result.output
    assert not any(line.startswith("warning") for line in result.output.splitlines()), result.output
    assert f"/api/models/{renamed}" in {path for _, path, _ in hub.requests}


def test_a_long_hub_reason_is_cut_between_words():
    from tpu_rl.scripts.cloud.hf_hub import _Answer, _hub_reason

    words = "Access to model meta-llama/Llama-3.1-8B-Instruct is restricted and you are not in the authorized list"
    reason = _hub_reason(_Answer(403, b"", {"X-Error-Message": f"{words} {words}"}))
    kept = reason.removeprefix("HTTP 403 ").removesuffix(" …")
    assert reason.endswith(" …") and f"{words} {words}".startswith(kept + " ") and len(kept) <= 160
