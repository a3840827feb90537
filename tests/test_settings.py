"""Per-user settings: sources, the example fallback, and every rule as a one-line error naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import USER_ENV

from tpu_rl.recipes import UserError, example_settings, get_recipe, load_settings
from tpu_rl.recipes.settings.specs import EXAMPLE_PROJECT, SPECS

GOOD = USER_ENV


def error_of(env: dict[str, str], **kwargs) -> str:
    with pytest.raises(UserError) as caught:
        load_settings(env, **kwargs)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_settings_come_from_the_seeds_environment_variables(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = load_settings(GOOD)
    assert (settings.project, settings.region, settings.zone) == ("my-rl-project", "us-east5", "us-east5-b")
    assert settings.cluster_name == "rl-cluster"
    assert settings.gcs_bucket == "my-rl-artifacts"
    assert settings.authorized_cidr == ("203.0.113.7/32", "198.51.100.0/24")
    assert settings.hf_token_secret == "hf-token"
    assert settings.state_bucket is None
    assert not settings.is_example


def test_nothing_set_gives_the_example_only_when_allowed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_settings({}, allow_example=True).project == EXAMPLE_PROJECT
    assert load_settings({}, allow_example=True).is_example
    # Nothing set: the same line as one missing setting, naming every one synth needs.
    assert error_of({}).startswith("PROJECT, REGION, ZONE, CLUSTER_NAME and GCS_BUCKET are not set: export PROJECT=<")


def test_config_file_is_read_and_the_environment_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from_file = {key.lower(): value for key, value in GOOD.items()} | {"gcs_bucket": "from-file"}
    (tmp_path / "tpu-rl.toml").write_text("\n".join(f'{key} = "{value}"' for key, value in from_file.items()))
    assert load_settings({}).gcs_bucket == "from-file"
    assert load_settings({"GCS_BUCKET": "from-env"}).gcs_bucket == "from-env"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('hf_token = "hf_abc"', "tokens do not belong in config files"),
        ('colour = "blue"', "unknown key 'colour'"),
        ("project = ", "is not valid TOML"),
        ("project = 3", "project must be a string"),
    ],
)
def test_bad_config_file_is_one_line(tmp_path, content, expected):
    path = tmp_path / "settings.toml"
    path.write_text(content)
    assert expected in error_of({"TPU_RL_CONFIG": str(path)})


def test_missing_config_file_named_by_env_is_one_line(tmp_path):
    assert "does not exist" in error_of({"TPU_RL_CONFIG": str(tmp_path / "missing.toml")})


@pytest.mark.parametrize(
    ("env", "value", "expected"),
    [
        ("GCS_BUCKET", "My_Bucket", "breaks GCS bucket naming"),
        ("GCS_BUCKET", "gs://my-bucket", "without gs://"),
        ("GCS_BUCKET", "my-google-bucket", "breaks GCS bucket naming"),
        ("GCS_BUCKET", "ab", "breaks GCS bucket naming"),
        ("GCS_BUCKET", "192.168.1.1", "looks like an IP address"),
        ("PROJECT", "My Project", "is not a valid project id"),
        ("PROJECT", "p1", "is not a valid project id"),
        ("CLUSTER_NAME", "a-cluster-name-over-twenty", "the limit is 20"),
        ("CLUSTER_NAME", "1cluster", "is not a DNS-1035 label"),
        ("CLUSTER_NAME", "Cluster", "is not a DNS-1035 label"),
        ("REGION", "useast5", "is not a region name"),
        ("ZONE", "europe-west4-a", "is not in REGION 'us-east5'"),
        ("ZONE", "us-east5", "is not a zone name"),
        ("AUTHORIZED_CIDR", "my-laptop", "is not a CIDR block"),
        ("AUTHORIZED_CIDR", "203.0.113.7/24", "host bits must be zero"),
        ("AUTHORIZED_CIDR", "2001:db8::/32", "is IPv6"),
        ("RESERVATION", "My Reservation", "is not a reservation name"),
        ("HF_TOKEN_SECRET", "hf token", "is not a Secret Manager secret id"),
        ("TPU_NAME", "TPU_VM", "is not an instance name"),
        ("TF_STATE_BUCKET", "State", "breaks GCS bucket naming"),
    ],
)
def test_bad_setting_is_one_line_naming_the_variable_and_the_rule(env, value, expected):
    message = error_of({**GOOD, env: value})
    assert message.startswith(env + " ")
    assert expected in message


@pytest.mark.parametrize("env", ["PROJECT", "REGION", "ZONE", "CLUSTER_NAME", "GCS_BUCKET"])
def test_missing_required_setting_says_what_to_export(env):
    message = error_of({k: v for k, v in GOOD.items() if k != env})
    assert message.startswith(f"{env} is not set: export {env}=")


def test_every_missing_setting_is_reported_at_once_with_one_export_line():
    message = error_of({k: v for k, v in GOOD.items() if k not in ("PROJECT", "ZONE", "GCS_BUCKET")})
    assert message.startswith("PROJECT, ZONE and GCS_BUCKET are not set: export PROJECT=<")
    assert " ZONE=<" in message and " GCS_BUCKET=<" in message
    assert message.endswith("or set project, zone and gcs_bucket in tpu-rl.toml")


def test_state_bucket_must_not_be_the_artifacts_bucket():
    message = error_of({**GOOD, "TF_STATE_BUCKET": GOOD["GCS_BUCKET"]})
    assert message.startswith(f"TF_STATE_BUCKET '{GOOD['GCS_BUCKET']}' is GCS_BUCKET")
    assert "create a separate bucket for Terraform state" in message
    assert load_settings({**GOOD, "TF_STATE_BUCKET": "my-rl-tf-state"}).state_bucket == "my-rl-tf-state"


def test_reservation_is_required_only_for_reservation_capacity():
    settings = load_settings({k: v for k, v in GOOD.items() if k != "RESERVATION"})
    with pytest.raises(UserError, match="^RESERVATION is not set, but recipe 'qwen3-v6e32' uses capacity 'reservation'"):
        settings.for_recipe(get_recipe("qwen3-v6e32"))


def test_gke_recipes_need_an_explicit_authorized_network():
    settings = load_settings({k: v for k, v in GOOD.items() if k != "AUTHORIZED_CIDR"})
    with pytest.raises(UserError, match="^AUTHORIZED_CIDR is not set.*no 0.0.0.0/0 default"):
        settings.for_recipe(get_recipe("gemma4-v6e64"))
    assert settings.for_recipe(get_recipe("llama31-v6e8")) is settings  # a VM has no control plane


def test_example_settings_are_valid_for_every_recipe_and_recognisable():
    settings = example_settings()
    assert settings.is_example
    for name in ("qwen3-v6e32", "gemma4-v6e64", "llama31-v6e8"):
        assert settings.for_recipe(get_recipe(name)) is settings


def test_settings_page_table_lists_every_setting():
    page = Path(__file__).resolve().parents[1].joinpath("docs", "settings.md").read_text()
    section = page.split("# Settings", 1)[1].split("\n## ", 1)[0]
    for spec in SPECS:
        assert f"| `{spec.env}` | `{spec.field}` |" in section, spec.env


# --- CAPACITY: the capacity mode, or an ordered fallback list, in place of each recipe's own ---------

def test_capacity_setting_is_an_ordered_list_from_the_environment_or_the_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_settings(GOOD).capacity is None  # unset: each recipe keeps its own
    assert load_settings({**GOOD, "CAPACITY": "flex-start"}).capacity == ("flex-start",)
    assert load_settings({**GOOD, "CAPACITY": " reservation, flex-start "}).capacity == ("reservation", "flex-start")
    config = tmp_path / "rl.toml"
    config.write_text('capacity = "spot,on-demand"\n')
    assert load_settings({"TPU_RL_CONFIG": str(config), **GOOD}).capacity == ("spot", "on-demand")


@pytest.mark.parametrize(("value", "message"), [
    ("preemptible", "CAPACITY 'preemptible' names 'preemptible': use one or an ordered comma-separated list of "
                    "reservation, flex-start, spot, on-demand"),
    ("spot,spot", "CAPACITY 'spot,spot' names a mode twice"),
])
def test_capacity_setting_names_only_known_modes_once(value, message):
    assert error_of({**GOOD, "CAPACITY": value}) == message


def test_capacity_setting_replaces_the_recipes_own_list_and_then_needs_no_reservation():
    settings = load_settings({**{k: v for k, v in GOOD.items() if k != "RESERVATION"}, "CAPACITY": "flex-start,spot"})
    qwen = settings.recipe(get_recipe("qwen3-v6e32"))  # recipes.toml: capacity = "reservation"
    assert qwen.capacity == ("flex-start", "spot")
    assert (qwen.name, qwen.shape) == (get_recipe("qwen3-v6e32").name, get_recipe("qwen3-v6e32").shape)
    # The VM cannot use flex-start: it takes the first mode of the list it can use.
    assert settings.recipe(get_recipe("llama31-v6e8")).capacity == ("spot",)


def test_without_capacity_setting_a_recipe_runs_as_written_and_still_needs_its_reservation():
    settings = load_settings(GOOD)
    assert settings.recipe(get_recipe("gemma4-v6e64")).capacity == ("reservation",)
    unreserved = load_settings({k: v for k, v in GOOD.items() if k != "RESERVATION"})
    with pytest.raises(UserError, match="^RESERVATION is not set, but recipe 'gemma4-v6e64' uses capacity 'reservation'"):
        unreserved.recipe(get_recipe("gemma4-v6e64"))
    fallback = load_settings({**{k: v for k, v in GOOD.items() if k != "RESERVATION"}, "CAPACITY": "reservation,flex-start"})
    with pytest.raises(UserError, match="^RESERVATION is not set"):
        fallback.recipe(get_recipe("gemma4-v6e64"))


def test_capacity_with_no_mode_a_vm_can_use_says_how_to_give_the_vm_one():
    settings = load_settings({**GOOD, "CAPACITY": "flex-start"})
    with pytest.raises(UserError) as caught:
        settings.recipe(get_recipe("llama31-v6e8"))
    assert str(caught.value) == (
        "CAPACITY 'flex-start' has no mode the TPU VM of recipe 'llama31-v6e8' can use (reservation, spot, "
        "on-demand): add one after the others, e.g. CAPACITY=flex-start,spot gives the VM spot")


def test_flex_start_needs_a_zone_that_offers_it():
    # recipes.toml [tpu.v6e.flex_start]: asia-northeast1-b, us-east5-a, us-east5-b (GKE flex-start docs).
    settings = load_settings({**GOOD, "ZONE": "us-east5-c", "CAPACITY": "flex-start"})
    with pytest.raises(UserError) as caught:
        settings.recipe(get_recipe("qwen3-v6e32"))
    assert str(caught.value) == ("ZONE 'us-east5-c' offers no flex-start v6e TPUs, which recipe 'qwen3-v6e32' uses: "
                                 "pick one of asia-northeast1-b, us-east5-a, us-east5-b (and its REGION)")
    assert load_settings({**GOOD, "ZONE": "us-east5-a", "CAPACITY": "flex-start"}).recipe(
        get_recipe("qwen3-v6e32")).capacity == ("flex-start",)
    # The zone matters only for flex-start.
    assert load_settings({**GOOD, "ZONE": "us-east5-c", "CAPACITY": "spot"}).recipe(
        get_recipe("qwen3-v6e32")).capacity == ("spot",)


def test_config_file_errors_name_the_real_cause(tmp_path, monkeypatch):
    # issue 28: a list holding a number was "not a TOML array"; the ./tpu-rl.toml the working directory
    # holds was told to "unset TPU_RL_CONFIG", which was not set; a tpu-rl.toml directory was ignored.
    monkeypatch.chdir(tmp_path)
    named = tmp_path / "named.toml"
    named.write_text('zone = ["us-east5-b", 5]\n')
    assert error_of({"TPU_RL_CONFIG": str(named)}) == (
        f'{named}: zone holds 5, a TOML integer: write every item as a string (in quotes), as a string or a list '
        'of strings, e.g. zone = "us-east5-b" or zone = ["us-east5-b"]')
    named.write_text("capacity = []\n")
    assert error_of({"TPU_RL_CONFIG": str(named)}).startswith(f"{named}: capacity is an empty list: give at least one")
    (tmp_path / "tpu-rl.toml").write_text("project: acme\n")
    message = error_of(GOOD)
    assert message.startswith("tpu-rl.toml is not valid TOML (") and message.endswith("): fix the file")
    assert "TPU_RL_CONFIG" not in message
    named.write_text("project: acme\n")
    assert error_of({"TPU_RL_CONFIG": str(named)}).endswith("): fix the file or unset TPU_RL_CONFIG")
    (tmp_path / "tpu-rl.toml").unlink()
    (tmp_path / "tpu-rl.toml").mkdir()
    assert error_of(GOOD) == ("tpu-rl.toml is a directory, not the TOML file of settings tpu-rl reads from the "
                              "working directory: rename it, or point TPU_RL_CONFIG at your settings file")


def test_a_config_file_may_list_the_list_settings_as_toml_arrays(tmp_path):
    config = tmp_path / "tpu-rl.toml"
    config.write_text('project = "acme-rl-research"\nregion = "us-east5"\nzone = "us-east5-b"\n'
                      'cluster_name = "acme-rl"\ngcs_bucket = "acme-rl-artifacts"\n'
                      'authorized_cidr = ["203.0.113.7/32", "198.51.100.0/24"]\ncapacity = ["flex-start", "spot"]\n')
    settings = load_settings({"TPU_RL_CONFIG": str(config)})
    assert settings.authorized_cidr == ("203.0.113.7/32", "198.51.100.0/24")
    assert settings.capacity == ("flex-start", "spot")


def test_zone_takes_a_list_of_zones_of_the_region_in_fallback_order():
    settings = load_settings({**GOOD, "ZONE": "us-east5-b, us-east5-a"})
    assert settings.zones == ("us-east5-b", "us-east5-a")
    assert settings.zone == "us-east5-b"  # the first: a VM's, a reservation's, the CPU pool's
    assert load_settings(GOOD).zones == ("us-east5-b",)
    assert error_of({**GOOD, "ZONE": "us-east5-b,europe-west4-a"}) == (
        "ZONE 'europe-west4-a' is not in REGION 'us-east5': pick a zone named us-east5-<letter>")
    assert error_of({**GOOD, "ZONE": "us-east5-b,"}).startswith("ZONE 'us-east5-b,' has an empty item")
    assert error_of({**GOOD, "ZONE": "us-east5-a,us-east5-a"}) == (
        "ZONE 'us-east5-a,us-east5-a' lists us-east5-a twice: name each zone once, in fallback order")


def test_a_config_file_may_list_zones_as_a_toml_array(tmp_path):
    config = tmp_path / "tpu-rl.toml"
    config.write_text('project = "acme-rl-research"\nregion = "us-east5"\nzone = ["us-east5-b", "us-east5-a"]\n'
                      'cluster_name = "acme-rl"\ngcs_bucket = "acme-rl-artifacts"\n')
    assert load_settings({"TPU_RL_CONFIG": str(config)}).zones == ("us-east5-b", "us-east5-a")


def test_flex_start_needs_every_zone_of_a_gke_stack_but_only_the_first_of_a_vm():
    settings = load_settings({**GOOD, "ZONE": "us-east5-b,us-east5-c", "CAPACITY": "flex-start,spot"})
    with pytest.raises(UserError) as caught:
        settings.recipe(get_recipe("qwen3-v6e32"))  # a GKE stack has flex-start pools in each zone
    assert str(caught.value).startswith("ZONE 'us-east5-c' offers no flex-start v6e TPUs")
    # A TPU VM lives in the first zone, and takes spot from this list anyway.
    assert settings.recipe(get_recipe("llama31-v6e8")).capacity == ("spot",)
