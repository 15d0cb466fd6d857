"""A checkpoint knows what model it holds; one trainer per run folder; one rule for checkpoint folders.

One short 1-process run (the session's ``default_run``, tests/end_to_end/conftest.py) writes the
checkpoints every test here reads; each test copies the folder it changes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest
import torch

from boost.training.data.tokenizer_fingerprint import tokenizer_fingerprint
from tests.end_to_end.default_run import DEFAULT_RUN
from tests.trainer import ROOT, SMALL, losses, preflight_refusal, train
from torchtitan_ext.guards.checkpoint_guard import check_model_identity

COMMON = DEFAULT_RUN


@pytest.fixture
def trained(default_run) -> tuple[Path, dict[int, float]]:
    """The shared default run (10 steps, a checkpoint every 2, 3 kept): ``(tmp folder, losses)``, dump folder
    ``out``."""
    return default_run.tmp, default_run.losses


def _copy_run(trained_tmp: Path, tmp_path: Path) -> Path:
    shutil.copytree(trained_tmp / "out" / "checkpoint", tmp_path / "out" / "checkpoint")
    return tmp_path / "out" / "checkpoint"


def _tokenizer_folder(tmp: Path) -> Path:
    """The offline BPE folder the trained run used (the shared cache of ``_preflight``)."""
    from torchtitan_ext.data.tokenizer import boost_tokenizer_dir
    from torchtitan_ext.preflight import check_job

    return boost_tokenizer_dir(
        check_job(
            [
                "--job.config_file",
                "train_configs/debug.toml",
                "--boost.cache_dir",
                str(tmp.parent / "boost-cache"),
            ],
            1,
        )
    )


@pytest.mark.slow
def test_every_checkpoint_records_its_model_and_keep_latest_k_holds(trained):
    tmp, _ = trained
    folder = tmp / "out" / "checkpoint"
    # saves at 2, 4, 6, 8, 10: the last-step save purges too, so 3 remain, not 4
    assert sorted(p.name for p in folder.iterdir()) == ["step-10", "step-6", "step-8"]
    try:
        version = metadata.version("boost-lowrank")
    except metadata.PackageNotFoundError:  # a checkout on sys.path, not installed (the GPU session's)
        version = "unknown (not installed)"
    for step in (6, 8, 10):
        record = json.loads((folder / f"step-{step}" / "boost_model.json").read_text())
        assert record["step"] == step and record["boost_version"] == version
        # the build that wrote it (a CUDA wheel's metadata drops its +cu label): a newer torch's save is told
        # from damage by it
        assert record["torch_version"] == torch.__version__
        model = record["model"]
        assert (model["flavor"], model["linear"], model["rank"], model["vocab_size"], model["dim"]) == (
            "debug",
            "cola",
            64,
            2048,
            256,
        )
        assert model["group_linears"] is True and model["rms_norm"] == "exact"
        assert "max_seq_len" not in model and "init_seed" not in model  # not identity
        assert model["tokenizer"] == tokenizer_fingerprint(_tokenizer_folder(tmp))


@pytest.mark.slow
def test_resuming_as_svd_from_a_cola_checkpoint_is_refused_without_a_traceback(trained, tmp_path):
    # SVD and CoLA factors have the same shapes: DCP would load them without complaint
    tmp, _ = trained
    folder = _copy_run(tmp, tmp_path)
    before = sorted(p.name for p in folder.iterdir())
    env = dict(os.environ, NGPU="1", PYTHON=sys.executable, BOOST_CACHE=str(tmp.parent / "boost-cache"))
    proc = subprocess.run(
        [
            "./run_train.sh",
            "--job.dump_folder",
            str(tmp_path / "out"),
            "--training.steps",
            "10",
            *SMALL,
            *COMMON,
            "--boost.linear",
            "svd",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "Traceback" not in out and out.count("BOOST checkpoint error") == 1, out
    assert f"{folder / 'step-10'} holds another model" in out
    assert "boost.linear  checkpoint: 'cola'        this job: 'svd'" in out
    assert "--job.dump_folder NEW_FOLDER" in out and "--checkpoint.no-enable" in out
    assert "torch.distributed.run" not in out and not (tmp_path / "out" / "tb").exists()  # no process started
    assert sorted(p.name for p in folder.iterdir()) == before


@pytest.mark.slow
def test_preflight_names_every_differing_field_and_lets_layout_changes_through(
    trained, tmp_path, monkeypatch
):
    tmp, _ = trained
    _copy_run(tmp, tmp_path)
    flavor = preflight_refusal(tmp_path, "--model.flavor", "60M", monkeypatch=monkeypatch)
    for line in (
        "model.flavor                    checkpoint: 'debug'       this job: '60M'",
        "dim (from model.flavor)         checkpoint: 256           this job: 512",
        "n_layers (from model.flavor)    checkpoint: 4             this job: 8",
        "boost.rank / boost.rank_ratio   checkpoint: 64            this job: 128",
    ):
        assert line in flavor, flavor
    assert "boost.linear" not in flavor  # only what differs
    assert "checkpoint: 64            this job: 32" in preflight_refusal(
        tmp_path, "--boost.rank", "32", monkeypatch=monkeypatch
    )
    ungrouped = preflight_refusal(tmp_path, "--boost.no-group-linears", monkeypatch=monkeypatch)
    assert "boost.group_linears" in ungrouped and "checkpoint: True" in ungrouped
    vocab = preflight_refusal(tmp_path, "--boost.tokenizer_vocab_size", "1024", monkeypatch=monkeypatch)
    assert "vocab_size (the tokenizer)  checkpoint: 2048" in vocab and "this job: 1024" in vocab
    # same model: the norm's implementation and the parallel layout are not identity (nor is the LaX gate's
    # form, which the rule table refuses on this CoLA run: it has no gate to compute)
    assert preflight_refusal(tmp_path, "--boost.norm", "sync", monkeypatch=monkeypatch) is None
    monkeypatch.setenv("WORLD_SIZE", "4")
    from torchtitan_ext.guards.checkpoint_guard import check_resume
    from torchtitan_ext.preflight import check_job

    check_resume(
        check_job(
            [
                "--job.config_file",
                "train_configs/debug.toml",
                "--job.dump_folder",
                str(tmp_path / "out"),
                "--boost.cache_dir",
                str(tmp_path.parent / "boost-cache"),
                "--parallelism.tensor_parallel_degree",
                "2",
                "--parallelism.data_parallel_shard_degree",
                "2",
            ],
            4,
        )
    )
    missing = preflight_refusal(tmp_path, "--checkpoint.load_step", "7", monkeypatch=monkeypatch)
    assert "checkpoint.load_step = 7: there is no checkpoint step-7" in missing
    assert "the steps saved there are [6, 8, 10]" in missing
    # a copied step folder carries its identity: a fresh run that starts from it is checked too
    seeded = preflight_refusal(
        tmp_path,
        "--checkpoint.initial_load_path",
        str(tmp_path / "out" / "checkpoint" / "step-10"),
        "--boost.linear",
        "lax",
        monkeypatch=monkeypatch,
        dump=tmp_path / "fresh",
    )
    assert "step-10 holds another model" in seeded and "checkpoint: 'cola'        this job: 'lax'" in seeded
    # a damaged record is not taken for "no record": refused, naming the file
    (tmp_path / "out" / "checkpoint" / "step-10" / "boost_model.json").write_text("{truncated")
    damaged = preflight_refusal(tmp_path, monkeypatch=monkeypatch)
    assert "step-10/boost_model.json is not a BOOST model identity" in damaged and "delete it" in damaged


@pytest.mark.slow
def test_a_lax_checkpoint_of_the_earlier_form_is_refused_with_what_to_do(trained, tmp_path, monkeypatch):
    """BOOST's LaX before the authors' form (σ(A·x) plus the previous block's, no gate or norm) recorded
    no form: such a checkpoint holds other weights for another function, and resuming it is refused."""
    tmp, _ = trained
    checkpoint = _copy_run(tmp, tmp_path)
    for step in checkpoint.glob("step-*"):
        record = json.loads((step / "boost_model.json").read_text())
        record["model"]["linear"] = "lax"  # what the earlier BOOST recorded for a LaX run: kind, no form
        assert "lax_form" not in record["model"] and "lax_gate" not in record["model"]
        (step / "boost_model.json").write_text(json.dumps(record))
    refused = preflight_refusal(tmp_path, "--boost.linear", "lax", monkeypatch=monkeypatch)
    assert "the LaX form (BOOST's version)" in refused, refused
    assert "BOOST's earlier LaX" in refused and "start the new LaX in another folder" in refused, refused
    assert "boost.linear" not in refused  # the kind is the same: only the form differs


@pytest.mark.slow
def test_another_tokenizer_of_the_same_size_is_refused_and_an_unrecorded_one_warns(
    trained, tmp_path, monkeypatch
):
    tmp, _ = trained
    folder = _copy_run(tmp, tmp_path)
    # The run's tokenizer with two ids swapped: the same 2048 tokens, other ids for two of them.
    swapped = tmp_path / "swapped_tokenizer"
    shutil.copytree(_tokenizer_folder(tmp), swapped)
    spec = json.loads((swapped / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    a, b = list(vocab)[300:302]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (swapped / "tokenizer.json").write_text(json.dumps(spec))
    refused = preflight_refusal(tmp_path, "--model.hf_assets_path", str(swapped), monkeypatch=monkeypatch)
    assert f"{folder / 'step-10'} holds another model" in refused, refused
    assert f"tokenizer (its files)  checkpoint: {tokenizer_fingerprint(_tokenizer_folder(tmp))!r}" in refused
    assert f"this job: {tokenizer_fingerprint(swapped)!r}" in refused
    assert (
        "vocab_size (the tokenizer)" not in refused
    )  # the size is the same: the fingerprint alone tells them apart
    assert "use the tokenizer the checkpoint was trained with" in refused
    # The same tokenizer from another folder (copied bytes) is the same tokenizer.
    same = tmp_path / "same_tokenizer"
    shutil.copytree(_tokenizer_folder(tmp), same)
    assert preflight_refusal(tmp_path, "--model.hf_assets_path", str(same), monkeypatch=monkeypatch) is None
    # A checkpoint written before the fingerprint was recorded: accepted, with a warning naming the field.
    record_path = folder / "step-10" / "boost_model.json"
    record = json.loads(record_path.read_text())
    del record["model"]["tokenizer"]
    record_path.write_text(json.dumps(record))
    assert (
        preflight_refusal(tmp_path, "--model.hf_assets_path", str(swapped), monkeypatch=monkeypatch) is None
    )
    from torchtitan_ext.preflight import check_job

    job = check_job(
        [
            "--job.config_file",
            "train_configs/debug.toml",
            "--job.dump_folder",
            str(tmp_path / "out"),
            "--boost.cache_dir",
            str(tmp.parent / "boost-cache"),
        ],
        1,
    )
    warning = check_model_identity(folder / "step-10", job)
    assert warning.startswith(
        f"{folder / 'step-10'} records no tokenizer (written before BOOST recorded it)"
    ), warning


@pytest.mark.slow
def test_resume_ignores_backups_accepts_old_checkpoints_and_keeps_latest_k(trained, tmp_path):
    tmp, straight = trained
    folder = _copy_run(tmp, tmp_path)
    shutil.rmtree(folder / "step-10")  # resume from step 8
    (folder / "step-8" / "boost_model.json").unlink()  # as written before BOOST recorded identities
    shutil.copytree(folder / "step-6", folder / "keep-step-400")  # a user's backup, with its .metadata
    shutil.copytree(folder / "step-6", folder / "step-20")
    (folder / "step-20" / ".metadata").unlink()  # a save that never finished: not one of the 3 kept
    log = train(tmp_path, *COMMON, steps=12)
    assert f"skipping checkpoint {folder / 'step-20'}: no .metadata" in log
    assert "Training starts at step 9" in log
    assert log.count("records no model identity") == 1, log[-3000:]
    resumed = losses(log)
    # 1 process: bit-identical (step 9 the loaded model, step 10 after an update with the loaded optimizer)
    assert {s: resumed[s] for s in (9, 10)} == {s: straight[s] for s in (9, 10)}
    # saves at 10 and 12 (the last): 3 intact step folders kept; the backup is not a checkpoint, so not
    # purged, nor is the unfinished step-20 (left for the user)
    assert sorted(p.name for p in folder.iterdir()) == [
        "keep-step-400",
        "step-10",
        "step-12",
        "step-20",
        "step-8",
    ]
    assert (folder / "step-12" / "boost_model.json").is_file()


def _trainer(out: Path, *overrides: str) -> list[str]:
    """One trainer process, as torchrun starts each rank (no run_train.sh preflight)."""
    return [
        sys.executable,
        "-m",
        "torchtitan_ext.train",
        "--job.config_file",
        "train_configs/debug.toml",
        "--job.dump_folder",
        str(out),
        *SMALL,
        "--validation.no-enable",
        "--checkpoint.no-enable",
        *overrides,
    ]


@pytest.mark.slow
def test_a_second_trainer_on_a_held_run_folder_refuses_naming_the_holder(tmp_path):
    from torchtitan_ext.guards.run_lock import LOCK_FILE, RunFolderInUse, check_run_folder_free

    out = tmp_path / "out"
    env = dict(
        os.environ,
        BOOST_CACHE=str(tmp_path.parent / "boost-cache"),
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT="0",
        OMP_NUM_THREADS="1",
    )
    first = subprocess.Popen(
        _trainer(out, "--training.steps", "100000"),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # waits on the lock's state; the bound is a hang guard alone (tests/trainer.py's runs have the same)
        hang_guard = time.monotonic() + 600
        while not (out / LOCK_FILE).is_file() or not (out / LOCK_FILE).read_text().startswith("pid "):
            assert first.poll() is None, "the first trainer ended before it took the lock"
            assert time.monotonic() < hang_guard, "the first trainer never took the lock"
            time.sleep(0.2)
        assert (out / LOCK_FILE).read_text().split()[1] == str(first.pid)
        os.kill(
            first.pid, signal.SIGSTOP
        )  # frozen, it still holds the lock, and leaves the cores to the second
        with pytest.raises(RunFolderInUse, match=f"in use by another trainer \\(pid {first.pid} on "):
            check_run_folder_free(out)  # run_train.sh's preflight
        second = subprocess.run(
            _trainer(out, "--training.steps", "5"),
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert second.returncode == 2, second.stderr[-3000:]
        assert f"is in use by another trainer (pid {first.pid} on" in second.stderr
        assert "Traceback" not in second.stderr
        assert first.poll() is None  # the first run is untouched
    finally:
        first.kill()
        first.wait()
    check_run_folder_free(out)  # the OS released the lock with the process


def test_checkpoint_folder_rule():
    from boost.runtime.checkpoint_folder import checkpoint_step

    assert [
        checkpoint_step(n) for n in ("step-0", "step-12", "keep-step-500", "step-007", "step-5.bak", "step-")
    ] == [0, 12, None, None, None, None]
