"""`tpu-rl secret set`: the token goes from stdin to a new Secret Manager version and nowhere else."""

from __future__ import annotations

import base64
import json

from typer.testing import CliRunner

from scripts.cli import app
from scripts.outcome import ExitCode

runner = CliRunner()
NEW_TOKEN = "hf_NEWsentinel987654321"


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


def test_secret_set_takes_no_token_argument(settings_env, google):
    result = runner.invoke(app, ["secret", "set", NEW_TOKEN])
    assert result.exit_code == 2 and len(google.secrets["hf-token"]) == 1
