"""One Python start before the ranks: the launcher reads a job without torch, and its schema is torchtitan's.

``torchtitan_ext.start`` (run_train.sh's one process) refuses a value that does not parse before torch
or torchtitan is imported, reading the job against torchtitan's dataclasses rebuilt from a committed
snapshot: the snapshot is held equal to the installed torchtitan here, so it cannot drift. The ranks
skip only the input-file checks the launcher ran for their very job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from torchtitan_ext.preflight import ConfigError, check_config, check_job, preflight
from torchtitan_ext.preflight.check import PREFLIGHT_MARK_ENV, preflight_mark

ROOT = Path(__file__).resolve().parents[2]
CONFIG = "train_configs/debug.toml"


def test_the_schema_snapshot_is_torchtitans():
    from torchtitan.config import JobConfig
    from torchtitan.hf_datasets.text_datasets import DATASETS

    from torchtitan_ext.data.dataset_check import BOOST_DATASETS, known_datasets
    from torchtitan_ext.data.text_datasets import register_datasets
    from torchtitan_ext.data.token_sources import TOKENS
    from torchtitan_ext.preflight import torchtitan_schema
    from torchtitan_ext.preflight.schema import describe_class, job_config_class
    from torchtitan_ext.torchtitan_private import merged_job_config_class

    # regenerate with: python -m torchtitan_ext.preflight.schema
    assert torchtitan_schema.JOB_CONFIG == describe_class(JobConfig)
    assert set(torchtitan_schema.DATASETS) == set(DATASETS) - set(BOOST_DATASETS)
    register_datasets()
    # BOOST's names are the ones it registers, and the prepared folders its own loader reads
    assert known_datasets() == sorted([*DATASETS, TOKENS])
    # merged with [boost] as torchtitan merges it: same sections, fields, annotations, defaults
    ours = job_config_class("torchtitan_ext.config")
    theirs = merged_job_config_class(["--job.custom_config_module", "torchtitan_ext.config"], None)
    assert describe_class(ours) == describe_class(theirs)
    assert asdict(ours()) == asdict(theirs())


# run_train.sh's launcher on three jobs that do not parse, in a fresh interpreter: what it printed and
# returned, and whether torch or torchtitan was imported by then
_REFUSE = """
import contextlib, io, json, sys
from torchtitan_ext.start import main
seen = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(argv)
    seen.append([code, err.getvalue(), sorted({m.split(".")[0] for m in sys.modules} & {"torch", "torchtitan"})])
print(json.dumps(seen))
"""


def test_a_value_that_does_not_parse_is_refused_before_torch_loads(tmp_path):
    malformed = tmp_path / "malformed.toml"
    malformed.write_text("[training]\nsteps = [\n")
    base = ["--job.config_file", CONFIG, "--job.dump_folder", str(tmp_path / "out")]
    jobs = {
        "--training.steps abc": [*base, "--training.steps", "abc"],
        "unknown field": [*base, "--training.stepz", "3"],
        "malformed TOML": ["--job.config_file", str(malformed)],
        "a broken rule": [*base, "--parallelism.tensor_parallel_degree", "3"],
    }
    proc = subprocess.run(
        [sys.executable, "-c", _REFUSE, json.dumps(list(jobs.values()))],
        cwd=ROOT,
        env=dict(os.environ, NGPU="2"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = dict(zip(jobs, json.loads(proc.stdout)))
    assert seen["--training.steps abc"] == [
        2,
        "BOOST config error: command line: --training.steps 'abc': expected int (run with --help for every field)\n",
        [],
    ]
    assert seen["unknown field"][1].startswith(
        "BOOST config error: command line: --training.stepz 3: unknown option; did you mean --training.steps?"
    )
    assert seen["malformed TOML"][1].startswith(f"BOOST config error: {malformed}: TOML syntax error:")
    assert seen["a broken rule"][1].startswith(
        "BOOST config error: parallelism = 'tp×pp×dp_replicate×cp = 3'"
    )
    assert all(code == 2 and imported == [] for code, _, imported in seen.values()), seen
    assert not (tmp_path / "out").exists()
    # and through run_train.sh itself: one line, exit 2
    shell = subprocess.run(
        ["./run_train.sh", *base[2:], "--training.steps", "abc"],
        cwd=ROOT,
        env=dict(os.environ, PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (shell.returncode, shell.stderr) == (2, seen["--training.steps abc"][1])


def test_the_launcher_and_a_rank_read_the_same_job(tmp_path):
    """The launcher's mark (from the values it read) equals a rank's (from torchtitan's parse of the same
    arguments), so the rank recognises the job as checked."""
    argv = [
        "--job.config_file", CONFIG, "--job.dump_folder", str(tmp_path / "out"), "--training.steps", "3",
        "--boost.no-group-linears", "--optimizer.lr=1", "--metrics.save_tb_folder=", "--debug.seed", "None",
    ]  # fmt: skip
    from torchtitan.config import ConfigManager

    assert preflight_mark(preflight(argv, 1), 1) == preflight_mark(ConfigManager().parse_args(argv), 1)
    assert preflight_mark(preflight(argv, 1), 1) != preflight_mark(preflight(argv, 1), 2)


def test_a_rank_skips_only_the_file_checks_the_launcher_ran_for_its_job(tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a document\n")
    argv = [
        "--job.config_file",
        CONFIG,
        "--training.dataset",
        "local",
        "--training.dataset_path",
        str(corpus),
    ]
    job = check_job([*argv, "--job.dump_folder", str(tmp_path / "out")], 1)
    other = check_job([*argv, "--job.dump_folder", str(tmp_path / "other")], 1)
    corpus.write_bytes(b"\x00\x01binary")  # broken after the launcher read it
    monkeypatch.delenv(PREFLIGHT_MARK_ENV, raising=False)
    with pytest.raises(ConfigError, match="corpus.txt"):
        check_config(job, 1)  # started by torchrun directly: every check
    monkeypatch.setenv(PREFLIGHT_MARK_ENV, preflight_mark(other, 1))
    with pytest.raises(ConfigError, match="corpus.txt"):
        check_config(job, 1)  # the launcher checked another job
    monkeypatch.setenv(PREFLIGHT_MARK_ENV, preflight_mark(job, 1))
    check_config(job, 1)  # this one: the files are not read again
    job.training.steps = 0
    monkeypatch.setenv(PREFLIGHT_MARK_ENV, preflight_mark(job, 1))
    with pytest.raises(ConfigError, match="training.steps = 0"):
        check_config(job, 1)  # the rules still run (no I/O)
