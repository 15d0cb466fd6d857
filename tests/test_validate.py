"""Bad input is refused before any work, with the field, the value and the fix (issue: reliability).

Each row of ``CASES`` is also a row of docs/config_errors.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import torchtitan_ext.cpu  # noqa: F401
from torchtitan_ext.validate import ConfigError, check_job

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "train_configs" / "debug_cola.toml")

# (overrides, world size, message fragment)
CASES = [
    (["--boost.rank", "300"], 1, "boost.rank = 300: must be below the smallest dim"),
    (["--boost.rank", "-1"], 1, "boost.rank = -1: must be positive"),
    (["--boost.rank_ratio", "1.5"], 1, "boost.rank_ratio = 1.5"),
    (["--boost.linear", "lora"], 1, "boost.linear = 'lora': choose one of"),
    (["--boost.norm", "layer"], 1, "boost.norm = 'layer': choose one of"),
    (["--boost.tp_scheme", "ring"], 1, "boost.tp_scheme = 'ring': choose one of"),
    (["--boost.activation_checkpoint", "selective"], 1, "boost.activation_checkpoint = 'selective'"),
    (["--parallelism.tensor_parallel_degree", "3", "--parallelism.data_parallel_shard_degree", "1"], 3,
     "parallelism.tensor_parallel_degree = 3: must divide n_heads = 8"),
    (["--parallelism.tensor_parallel_degree", "8", "--parallelism.data_parallel_shard_degree", "1"], 8,
     "parallelism.tensor_parallel_degree = 8: must divide kv_heads = 4"),
    (["--parallelism.tensor_parallel_degree", "2", "--parallelism.data_parallel_shard_degree", "2"], 2,
     "parallelism.data_parallel_shard_degree = 2: tp×pp×dp_replicate×cp×dp_shard = 4 must equal the world size 2"),
    (["--parallelism.tensor_parallel_degree", "2"], 3, "must divide the world size 3"),
    (["--parallelism.pipeline_parallel_degree", "8", "--parallelism.data_parallel_shard_degree", "1"], 8,
     "more stages than the 4 layers"),
    (["--boost.linear", "lax", "--parallelism.pipeline_parallel_degree", "2"], 2, "lax carries latents"),
    (["--boost.linear", "full", "--parallelism.tensor_parallel_degree", "2"], 2, 'uses tp_scheme = "megatron"'),
    (["--boost.tp_scheme", "megatron", "--parallelism.tensor_parallel_degree", "2"], 2, "megatron is the dense baseline"),
    (["--boost.tokenizer_vocab_size", "2047", "--parallelism.tensor_parallel_degree", "2"], 2,
     "boost.tokenizer_vocab_size = 2047: must be divisible by the TP degree 2"),
    (["--training.dataset", "local", "--training.dataset_path", "/nonexistent/corpus"], 1,
     "training.dataset_path = '/nonexistent/corpus' does not exist"),
    (["--training.dataset", "local"], 1, "training.dataset_path"),
    (["--model.hf_assets_path", "/nonexistent/tokenizer"], 1, "model.hf_assets_path = '/nonexistent/tokenizer': holds no tokenizer.json"),
    (["--training.seq_len", "1"], 1, "training.seq_len = 1"),
    (["--training.steps", "0"], 1, "training.steps = 0"),
    (["--model.flavor", "2B"], 1, "model.flavor = '2B': choose one of"),
]


@pytest.mark.parametrize("overrides,world_size,message", CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_bad_config_is_refused_with_field_and_fix(overrides, world_size, message):
    with pytest.raises(ConfigError) as err:
        check_job(["--job.config_file", CONFIG, *overrides], world_size)
    assert message in str(err.value)


def test_toml_syntax_error_names_the_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[job]\ndump_folder = "x"\n[boost\nlinear = "cola"\n')
    with pytest.raises(ConfigError, match=r"TOML syntax error.*line 3"):
        check_job(["--job.config_file", str(bad)], 1)


def test_missing_config_file():
    with pytest.raises(ConfigError, match="job.config_file = '/nope.toml': no such file"):
        check_job(["--job.config_file", "/nope.toml"], 1)


def test_local_norm_warns_that_it_is_not_the_dense_model():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_job(["--job.config_file", CONFIG, "--boost.norm", "local", "--parallelism.tensor_parallel_degree", "2",
                   "--parallelism.data_parallel_shard_degree", "1"], 2)
    assert any("NOT the dense" in str(w.message) for w in caught)


def test_every_shipped_config_is_valid():
    import re

    for cfg in sorted((ROOT / "train_configs").glob("*.toml")):
        text = cfg.read_text()
        tp = int(re.search(r"tensor_parallel_degree = (\d+)", text).group(1))
        pp = int(re.search(r"pipeline_parallel_degree = (\d+)", text).group(1))
        check_job(["--job.config_file", str(cfg)], tp * pp)


def test_run_train_refuses_before_starting_any_process(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, NGPU="2")
    proc = subprocess.run(["./run_train.sh", "--job.dump_folder", str(tmp_path), "--parallelism.tensor_parallel_degree", "3"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "BOOST config error: parallelism" in proc.stderr
    assert not any(tmp_path.iterdir())  # nothing written
