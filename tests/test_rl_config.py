"""Settings of ``cudaperf train policy`` (cudaperf_cli/rl/config.py): validation and TOML."""

from __future__ import annotations

import pytest

from cudaperf_cli.core import CudaperfError
from cudaperf_cli.reward import RewardConfig
from cudaperf_cli.rl.config import PolicyTrainConfig, describe_fields, load_train_config
from cudaperf_cli.rl.evaluate import pick_devices


def test_defaults_and_shapes():
    cfg = PolicyTrainConfig()
    assert (cfg.turns, cfg.trajectories, cfg.problems_per_step) == (2, 4, 1)
    assert cfg.group_size == 8 and cfg.batch_size == 8
    assert cfg.reward == RewardConfig()
    assert cfg.to_dict()["reward"]["discount"] == 0.4
    assert all(help_ for _, _, help_ in describe_fields())  # every field documented


@pytest.mark.parametrize("kw, needle", [
    ({"turns": 0}, "turns must be >= 1"),
    ({"turns": 1, "trajectories": 1}, "turns \\* trajectories must be >= 2"),
    ({"temperature": 0.0}, "temperature must be > 0"),
    ({"top_p": 1.5}, "top_p must be in"),
    ({"grad_accum": 3}, "grad_accum \\(3\\) must divide"),
    ({"loss_type": "ppo"}, "loss_type must be one of"),
    ({"steps": "10"}, "steps must be an integer"),
    ({"lora": 1}, "lora must be true or false"),
    ({"turn_baseline": True, "trajectories": 1}, "turn_baseline needs trajectories >= 2"),
    ({"use_vllm": True, "vllm_mode": "server"}, "vllm_server_base_url must be set"),
])
def test_bad_values_name_the_field(kw, needle):
    with pytest.raises(ValueError, match=needle):
        PolicyTrainConfig(**kw)


def test_toml_tables_and_overrides(tmp_path):
    f = tmp_path / "train.toml"
    f.write_text('[optimize]\nturns = 5\n\n[train.policy]\nturns = 3\nmax-new-tokens = 256\nlora = true\n\n'
                 '[reward]\ndiscount = 0.5\nspeedup_key = "compile"\n')
    cfg = load_train_config(f, {"turns": None, "trajectories": 2})
    assert (cfg.turns, cfg.trajectories, cfg.max_new_tokens, cfg.lora) == (3, 2, 256, True)
    assert cfg.reward.discount == 0.5 and cfg.reward.speedup_key == "compile"
    assert load_train_config(f, {"turns": 4}).turns == 4  # the command line wins


@pytest.mark.parametrize("text, needle", [
    ("[train.policy]\nturnz = 3\n", "unknown key\\(s\\) turnz"),
    ("[train.ranker]\nx = 1\n", "unknown table \\[train.ranker\\]"),
    ("[bench]\nx = 1\n", "unknown table or key 'bench'"),
    ("[reward]\ndiscount = 2.0\n", "\\[reward\\] RewardConfig.discount must be in"),
    ("[reward]\nspeed = 1\n", "unknown reward setting"),
    ("[train.policy]\nsteps = 0\n", "steps must be >= 1"),
    ("[train.policy\n", "not valid TOML"),
])
def test_toml_errors(tmp_path, text, needle):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(CudaperfError, match=needle):
        load_train_config(f)


def test_missing_config_file(tmp_path):
    with pytest.raises(CudaperfError, match="no such file"):
        load_train_config(tmp_path / "nope.toml")


def test_devices():
    assert pick_devices(0, None) == ("cpu", 0)
    assert pick_devices(1, None) == ("cuda:0", 0)
    assert pick_devices(2, None) == ("cuda:0", 1)  # training on GPU 0, evaluation on GPU 1
    assert pick_devices(4, 3) == ("cuda:0", 3)
    with pytest.raises(ValueError, match="not visible"):
        pick_devices(2, 2)
