"""``python -m torchtitan_ext.preflight``: run_train.sh's check alone, at the launcher's world size (NGPU)."""

from __future__ import annotations

from pathlib import Path

from torchtitan_ext.preflight import main

ROOT = Path(__file__).resolve().parents[2]
TP2 = ("--parallelism.tensor_parallel_degree", "2", "--parallelism.data_parallel_shard_degree", "1")


def _check(tmp_path: Path, *args: str) -> int:
    """The check's exit code (0: it would start), as the command line gives it."""
    try:
        main(
            [*args, "--job.dump_folder", str(tmp_path / "out"), "--boost.cache_dir", str(tmp_path / "cache")]
        )
    except SystemExit as e:
        return e.code
    return 0


def test_the_check_reads_the_launchers_ngpu(tmp_path, monkeypatch, capsys):
    # run_train.sh's world size is NGPU: the check alone takes the same, not torchrun's WORLD_SIZE
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("NGPU", "2")
    assert _check(tmp_path, "--job.config_file", str(ROOT / "train_configs" / "debug.toml"), *TP2) == 0
    monkeypatch.setenv("NGPU", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert _check(tmp_path, "--job.config_file", str(ROOT / "train_configs" / "debug.toml"), *TP2) == 2
    assert "world size 1 (NGPU)" in capsys.readouterr().err


def test_the_check_of_a_multi_node_job_counts_every_node(tmp_path, monkeypatch, capsys):
    # scripts/node_train.sh: NGPU a node, NNODES nodes; the refusal says where its world size came from
    monkeypatch.setenv("NGPU", "1")
    monkeypatch.setenv("NNODES", "2")
    assert _check(tmp_path, "--job.config_file", str(ROOT / "train_configs" / "debug.toml"), *TP2) == 0
    monkeypatch.setenv("NNODES", "3")
    assert _check(tmp_path, "--job.config_file", str(ROOT / "train_configs" / "debug.toml"), *TP2) == 2
    assert "world size 3 (NGPU × NNODES)" in capsys.readouterr().err


def test_the_check_without_a_toml_names_the_flag_it_needs(tmp_path, monkeypatch, capsys):
    # without a TOML there is no [boost] section: the first boost field would read as an unknown option
    monkeypatch.setenv("NGPU", "1")
    assert _check(tmp_path, "--boost.linear", "full") == 2
    err = capsys.readouterr().err
    assert "job.config_file = None: name the TOML to check: --job.config_file train_configs/debug.toml" in err
    assert "unknown option" not in err


def test_a_kernel_this_machine_cannot_train_is_refused_before_the_rules_it_brings(
    tmp_path, monkeypatch, capsys
):
    # flex at NGPU=2 on a CPU was refused for boost.log_comm first, and for flex itself once that was followed;
    # where torch trains flex (an accelerator), the log_comm rule is the refusal. The table's own order holds
    # in check_job (tests/unit/test_preflight.py's CASES: the same on every device).
    from torchtitan_ext.infra.attention import kernel_problem

    monkeypatch.setenv("NGPU", "2")
    flex = ("--job.config_file", str(ROOT / "train_configs" / "debug.toml"), "--boost.attn_type", "flex")
    assert _check(tmp_path, *flex, *TP2) == 2
    (line,) = capsys.readouterr().err.splitlines()
    if kernel_problem("flex") is None:
        assert line.startswith(
            "BOOST config error: boost.log_comm = True: FlexAttention's kernel is compiled"
        )
    else:
        assert line.startswith("BOOST config error: boost.attn_type = 'flex': torch ")
        assert "does not train it on cpu" in line and "boost.log_comm" not in line
    # a refusal no kernel avoids is the table's, the machine not asked
    assert _check(tmp_path, *flex, "--boost.no-log-comm", "--boost.rank", "300") == 2
    assert "boost.rank = 300: must be below the smallest dim" in capsys.readouterr().err
