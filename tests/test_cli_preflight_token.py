"""Preflight asks the Hugging Face Hub (tests/peers/hf_hub.py) whether the stored token can download the
recipe's model, so a token that never could fails before the deploy, with the licence to accept named."""

from __future__ import annotations

from typer.testing import CliRunner

from peers.fixtures import SETTINGS, TOKEN, _free_port
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app

runner = CliRunner()
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
QWEN = "Qwen/Qwen3-30B-A3B-Instruct-2507"


def access_line(result) -> str:
    [line] = [line for line in result.output.splitlines() if line.split(":")[0].endswith("model access")]
    return line


def llama_preflight(google):
    google.reservations[(SETTINGS["ZONE"], SETTINGS["RESERVATION"])] = ("ct6e-standard-8t", 1, 0)
    return runner.invoke(app, ["preflight", "llama31-v6e8"])


def test_a_token_that_reads_the_model_passes_and_is_sent_only_as_a_bearer_header(settings_env, gcs, google, hub):
    result = runner.invoke(app, ["preflight", "qwen3-v6e32"])
    assert result.exit_code == 0, result.output
    assert access_line(result) == f"pass  model access: tester can read {QWEN} (not gated)"
    assert {path for _, path, _ in hub.requests} == {
        "/api/whoami-v2", f"/api/models/{QWEN}", f"/{QWEN}/resolve/main/config.json"}
    assert hub.bearers == [TOKEN] * 3 and TOKEN not in result.output


def test_a_token_the_hub_refuses_fails_preflight(settings_env, gcs, google, hub):
    hub.tokens.clear()  # what `printf 'abc' | tpu-rl secret set` stores
    result = runner.invoke(app, ["preflight", "qwen3-v6e32"])
    assert result.exit_code == ExitCode.PREFLIGHT_FAILED, result.output
    line = access_line(result)
    assert line.startswith("FAIL  model access: the Hugging Face Hub") and "does not accept this token" in line
    assert "https://huggingface.co/settings/tokens" in line and TOKEN not in result.output


def test_a_gated_model_whose_licence_is_not_accepted_names_the_licence_and_where(settings_env, gcs, google, hub):
    hub.accepted.clear()
    result = llama_preflight(google)
    assert result.exit_code == ExitCode.PREFLIGHT_FAILED, result.output
    line = access_line(result)
    assert line.startswith(f"FAIL  model access: tester may not download {LLAMA}, a gated model: accept the "
                           f"llama3.1 licence at https://huggingface.co/{LLAMA}")
    assert TOKEN not in result.output


def test_an_accepted_licence_passes(settings_env, gcs, google, hub):
    result = llama_preflight(google)
    assert result.exit_code == 0, result.output
    assert access_line(result) == f"pass  model access: tester can read {LLAMA} (gated (manual), its licence accepted)"


def test_an_unreachable_hub_is_a_warning_naming_the_check_by_hand(settings_env, gcs, google, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_free_port()}")  # nothing listens there
    result = runner.invoke(app, ["preflight", "qwen3-v6e32"])
    assert result.exit_code == 0, result.output
    line = access_line(result)
    assert line.startswith("pass  model access: warning: the Hugging Face Hub (http://127.0.0.1:") and QWEN in line


def test_a_malformed_hf_endpoint_is_one_line(settings_env, gcs, google, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "huggingface.co")
    result = runner.invoke(app, ["preflight", "qwen3-v6e32"])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert "HF_ENDPOINT='huggingface.co' is not an http(s) URL" in result.output


def test_a_rate_limited_hub_is_a_warning_that_says_what_it_answered(settings_env, gcs, google, hub):
    """A 429 from whoami says nothing about the token (huggingface_hub hf_api.py _inner_whoami): preflight
    warns with what the Hub answered, not that it did not answer."""
    from peers.http import Fault

    hub.faults.append(Fault("GET", "/api/whoami-v2", 429))
    result = llama_preflight(google)
    assert result.exit_code == 0, result.output
    line = " ".join(access_line(result).split())
    assert line.startswith(f"pass model access: warning: the Hub answered HTTP 429 ({hub.url}), so the token was "
                           "not checked"), line
    assert "did not answer" not in line
