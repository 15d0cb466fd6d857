"""Check a job before it runs: the values the reader read, the rule table, the input files, the checkpoint.

``preflight(argv, world_size)`` is the check before any process starts (``run_train.sh``'s launcher,
``torchtitan_ext.start``, and ``python -m torchtitan_ext.preflight``): the job as read
(``torchtitan_ext.preflight.read``: the TOML file, every value's type, the command line's overrides),
the range and combination rules (``torchtitan_ext.preflight.job_rules.RULES``, one table) on those
values (a refusal bound to the attention kernel asks first whether this machine trains it), then the input
files (corpus, tokenizer) and the checkpoint it would resume from. None of it
builds torchtitan's ``JobConfig``, so the launcher imports no torchtitan: a ``ConfigError`` names the
field or file, the value and the fix, and ``main`` prints it as one line and exits 2.

``check_job(argv, world_size)`` checks the same and builds the ``JobConfig`` with torchtitan's own
parse, holding it to its annotations (for tests and in-process callers). ``torchtitan_ext.train``
runs ``check_config`` on every rank before any process group exists: the rules again (cheap), and
the input files unless the launcher read them for this very job (``preflight_mark``). docs/config_errors.md lists
the rules; tests/unit/test_preflight.py and tests/unit/test_config_fuzz.py hold them to it."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import sys
import warnings
from dataclasses import asdict, is_dataclass
from pathlib import Path
from types import SimpleNamespace

from boost.training import rules
from boost.training.config_error import ConfigError, refuse
from torchtitan_ext.config import DRY_RUN_COMM_MODE
from torchtitan_ext.preflight.config_types import check_instance
from torchtitan_ext.preflight.job_rules import JobContext, broken_rule, kernel_bound
from torchtitan_ext.preflight.job_warnings import JobWarning, job_warnings
from torchtitan_ext.preflight.read import (
    BOOST_CONFIG_MODULE,
    ReadJob,
    as_dict,
    config_file_argument,
    load_toml,
    read_job,
)
from torchtitan_ext.torch_range import check_newer_torch
from torchtitan_ext.torchtitan_private import job_config_from_toml, merged_job_config_class

__all__ = [
    "ConfigError",
    "check_config",
    "check_job",
    "dry_run_mode",
    "dry_run_rank",
    "load_toml",
    "log_ranks",
    "main",
    "preflight",
    "preflight_mark",
    "world_size_from_env",
]

_PACKAGE = Path(__file__).resolve().parents[1]  # torchtitan_ext: the warnings BOOST raises itself

# Set by the launcher for the ranks it starts: the job it checked (``preflight_mark``).
PREFLIGHT_MARK_ENV = "BOOST_PREFLIGHT_PASSED"


def world_size_from_env(job=None) -> int:
    """``WORLD_SIZE`` (torchrun sets it in each rank), or ``NGPU`` itself where ``job`` is a dry run
    (``--comm.mode fake_backend``: torchtitan's world size then, with no torchrun to set ``WORLD_SIZE``);
    refused unless it is a whole number."""
    dry = job is not None and getattr(getattr(job, "comm", None), "mode", None) == DRY_RUN_COMM_MODE
    return process_count(os.environ.get("NGPU", "1") if dry else os.environ.get("WORLD_SIZE", "1"))


def process_count(raw: str) -> int:
    """``NGPU`` (or ``WORLD_SIZE``) as a number, refused unless it is a whole number (the rules check its range)."""
    try:
        return int(raw)
    except ValueError:
        refuse("NGPU", raw, "must be a whole number of processes, at least 1")


def dry_run_rank(raw: str | None, ngpu: int, dry_run: bool) -> int:
    """The rank a dry run plays (``DRY_RUN_RANK``, unset: 0), refused unless it is one of the ``ngpu``
    ranks, and where no dry run would read it (``dry_run``: ``comm.mode = "fake_backend"``)."""
    if raw is None or raw == "":
        return 0
    if not dry_run:
        refuse("DRY_RUN_RANK", raw, "only a dry run plays a rank: set DRY_RUN=1 beside it, or unset it")
    fix = f"must be one of the dry run's NGPU = {ngpu} ranks, 0 to {ngpu - 1}"
    try:
        rank = int(raw)
    except ValueError:
        refuse("DRY_RUN_RANK", raw, fix)
    if not 0 <= rank < ngpu:
        refuse("DRY_RUN_RANK", rank, fix)
    return rank


def log_ranks(raw: str | None, ngpu: int) -> str | None:
    """The ranks ``LOG_RANK`` shows on the console, as torchrun's ``--local-ranks-filter`` takes them
    (``"0,2"``; unset or empty: ``None``), refused unless each is one of this node's ``ngpu`` ranks: torchrun
    stops with a traceback on anything but integers, and shows nothing for a rank that does not exist."""
    if raw is None or raw.strip() == "":
        return None
    fix = (
        f"must be ranks of this node's NGPU = {ngpu} processes: comma-separated integers from 0 to {ngpu - 1}"
    )
    try:
        ranks = [int(part) for part in raw.split(",")]
    except ValueError:
        refuse("LOG_RANK", raw, fix)
    if not all(0 <= rank < ngpu for rank in ranks):
        refuse("LOG_RANK", raw, fix)
    return ",".join(map(str, ranks))


def dry_run_mode(comm_mode: str, dry_run: bool) -> None:
    """``comm.mode`` as the launcher's ``DRY_RUN`` has it: ``fake_backend`` is what ``DRY_RUN=1`` passes (one
    process playing a rank); given without it, each of the NGPU processes torchrun starts would play rank 0
    of the same run folder, and with ``DRY_RUN=1`` another mode would start no fake process group."""
    if dry_run and comm_mode != DRY_RUN_COMM_MODE:
        refuse("comm.mode", comm_mode, "DRY_RUN=1 runs on the fake process group: drop --comm.mode")
    if not dry_run and comm_mode == DRY_RUN_COMM_MODE:
        refuse("comm.mode", comm_mode, "a dry run is one process playing a rank: set DRY_RUN=1 instead")


def check_values(job: ReadJob, world_size: int | None = None, machine_first: bool = False) -> int:
    """Refuse the read job for the first rule it breaks; return the world size it was checked at
    (``world_size``, else the environment's, as ``world_size_from_env`` reads it). ``machine_first``:
    as ``check_rules``."""
    values = job.values
    world_size = world_size if world_size is not None else world_size_from_env(values)
    # BOOST's rules read the values before torchtitan's dataclasses exist: their __post_init__ checks
    # would refuse some values without naming the field, and the rule table names it with the fix.
    _check_boost_section(values)
    check_rules(values, world_size, machine_first)
    return world_size


def preflight(argv: list[str], world_size: int | None = None) -> SimpleNamespace:
    """The check before any process starts: ``argv`` read (``read_job``), the rules, the input files,
    the run folder and checkpoint it would resume from, then the warnings; the job's values.

    Everything before the run folder's check imports neither torch nor torchtitan; that check loads
    torch (checkpoint metadata), after a torch newer than the supported range is checked for the private
    names BOOST bridges (``torch_range.check_newer_torch``), and torchtitan only where a checkpoint's
    model is compared with the job's (whose vocabulary is the tokenizer's, as torchtitan loads it).
    ``ConfigError`` for a bad job, ``CheckpointRefused`` / ``RunFolderInUse`` (``SystemExit``s with the
    message) for a run folder that must not be resumed or is in use, and a ``SystemExit`` with its line
    for a newer torch that lacks a private name. A job that passes gets its warnings (``job_warnings``, and
    those of the input files' checks) on stderr, one line each, before any work."""
    job = read_job(argv)
    if job.help_asked:
        _print_help(argv)
    with _warnings_one_line_each():
        world_size = check_values(job, world_size, machine_first=True)
        check_input_files(job.values, world_size)
        check_newer_torch()  # torch is imported from here on: a torch newer than the range, checked first
        from torchtitan_ext.guards.checkpoint_guard import check_resume  # the checkpoint reader needs torch

        check_resume(job.values)
        check_this_machine(job.values)
        _warn(job.values, world_size)
    return job.values


@contextlib.contextmanager
def _warnings_one_line_each():
    """The warnings raised inside, said once it ends without a refusal: BOOST's own (``JobWarning``s,
    the input checks') one line each, ``BOOST warning: <message>``; any other as Python shows it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        yield
    for said in caught:
        if issubclass(said.category, JobWarning) or Path(said.filename).is_relative_to(_PACKAGE):
            print(f"BOOST warning: {said.message}", file=sys.stderr, flush=True)
        else:
            warnings.showwarning(said.message, said.category, said.filename, said.lineno)


def check_job(argv: list[str], world_size: int | None = None):
    """Read ``argv`` (and the TOML it names) as torchtitan would, check it, and return torchtitan's
    ``JobConfig`` (built by torchtitan's own parse, and held to its annotations)."""
    job = read_job(argv)
    if job.help_asked:
        _print_help(argv)
    world_size = check_values(job, world_size)
    built = _torchtitan_job(argv, job)
    check_instance(built)  # what torchtitan built, typed as its annotations say; the rules ran on its values
    _check_built_job(built, world_size)
    return built


def _print_help(argv: list[str]) -> None:
    from torchtitan.config import ConfigManager

    ConfigManager().parse_args(argv)  # tyro prints the help and exits


def _torchtitan_job(argv: list[str], job: ReadJob):
    """The ``JobConfig`` torchtitan builds from values the preflight has read and checked."""
    from torchtitan.config import ConfigManager

    captured = io.StringIO()
    try:
        overrides = job.overrides
        if job.config_file and set(overrides) <= {"job"} and set(overrides.get("job", {})) <= {"config_file"}:
            # Only the TOML: torchtitan's TOML-to-dataclass step is then the whole parse (tyro would
            # return its defaults unchanged, after 0.2 s of building a parser).
            config_cls = merged_job_config_class(argv, job.toml_values)
            return job_config_from_toml(config_cls, job.toml_values, job.config_file)
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
            return ConfigManager().parse_args(argv)
    except SystemExit as e:
        if e.code in (0, None):
            raise
        # The preflight's reading of the command line accepted what tyro refuses: tyro's own words, then ours.
        sys.stderr.write(captured.getvalue())
        raise ConfigError(
            "command line: torchtitan's parser (tyro) refused it (above), though the preflight "
            "read it: a gap in torchtitan_ext.preflight.command_line"
        ) from None
    except (AssertionError, ValueError) as e:  # a __post_init__ check the rule table does not state
        raise ConfigError(f"torchtitan refused the configuration: {e or type(e).__name__}") from None


def check_rules(job, world_size: int, machine_first: bool = False) -> None:
    """Refuse ``job`` (a ``JobConfig``, or its values) for the first rule of the table it breaks; the
    values are well typed (``config_types``), and [boost] is there.

    The table holds on every device, so its refusals are the same everywhere (tests/unit/test_preflight.py's
    CASES). With ``machine_first`` (the launcher's check: what a user sees), a refusal that another
    ``boost.attn_type`` would not get first asks this machine whether it trains the job's kernel at all
    (``check_attention_kernel``): flex on a CPU is refused as such, not for ``boost.log_comm``, whose fix
    would only lead to it. Other refusals import no torch."""
    found = broken_rule(job, world_size)
    if found is not None:
        rule, value, message = found
        if machine_first and kernel_bound(rule, job, world_size):
            check_attention_kernel(job)
        refuse(rule.field, value, message)


def _check_boost_section(job) -> None:
    if not hasattr(job, "boost"):
        refuse("job.custom_config_module", job.job.custom_config_module, f'set it to "{BOOST_CONFIG_MODULE}"')


def preflight_mark(job, world_size: int) -> str:
    """A digest of a job's values (a ``JobConfig`` or the read values) and world size: the launcher
    hands its own to the ranks it starts, and a rank whose job has the same digest was checked in full."""
    values = asdict(job) if is_dataclass(job) else as_dict(job)
    text = json.dumps([values, world_size], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def check_config(job, world_size: int) -> None:
    """Raise ``ConfigError`` for the first thing that cannot work; warn for what works but misleads.

    In a rank of a launch whose preflight checked this very job (``PREFLIGHT_MARK_ENV``), the input
    files are not read again (a corpus is read in full) and the warnings were printed: the rules still
    run (no I/O). A rank started by torchrun directly checks everything."""
    _check_boost_section(job)
    check_instance(job)
    check_rules(job, world_size)
    if os.environ.get(PREFLIGHT_MARK_ENV) != preflight_mark(job, world_size):
        _check_built_job(job, world_size)


def _check_built_job(job, world_size: int) -> None:
    """What a job whose values passed the rules still needs: its input files, and the warnings."""
    check_input_files(job, world_size)
    check_this_machine(job)
    _warn(job, world_size)


def check_this_machine(job) -> None:
    """What runs only on this machine's torch and device, asked here: the launcher's and every rank's
    (on one node, the same)."""
    check_attention_kernel(job)
    check_pipeline_runtime(job)
    check_accelerator_needs(job)


def check_accelerator_needs(job) -> None:
    """What moves memory between an accelerator and the CPU, refused on a machine without one (where torchtitan
    stops in each rank with a traceback)."""
    from torchtitan_ext.cpu import on_cpu  # torch's device probe

    if not on_cpu():
        return
    if job.training.enable_cpu_offload:
        refuse(
            "training.enable_cpu_offload",
            True,
            "FSDP's CPU offload keeps weights on the CPU for an accelerator, and this machine has none "
            "(torchtitan's process group would pair cpu:gloo with itself): set it false",
        )
    if job.checkpoint.enable and job.checkpoint.async_mode == "async_with_pinned_mem":
        refuse(
            "checkpoint.async_mode",
            job.checkpoint.async_mode,
            'pinned-memory staging copies from an accelerator, and this machine has none: use "async" or "disabled"',
        )


def check_attention_kernel(job) -> None:
    """``boost.attn_type`` trains on this machine's device: torch's say, asked there
    (``torchtitan_ext.infra.attention.kernel_problem``). Where a rank runs, its device is the launcher's."""
    from torchtitan_ext.infra.attention import kernel_problem  # torch: after the checks that need none

    problem = kernel_problem(job.boost.attn_type)
    if problem is not None:
        refuse("boost.attn_type", job.boost.attn_type, problem)


def check_pipeline_runtime(job) -> None:
    """``parallelism.pipeline_parallel_schedule`` runs right on this machine's torch (where a rank runs, it is
    the launcher's)."""
    from torchtitan_ext.torch_private import EXACT_SPLIT_BACKWARD

    par = job.parallelism
    problem = rules.pipeline_runtime_problem(
        par.pipeline_parallel_schedule,
        par.pipeline_parallel_degree,
        exact_split_backward=EXACT_SPLIT_BACKWARD,
    )
    if problem is not None:
        refuse("parallelism.pipeline_parallel_schedule", par.pipeline_parallel_schedule, problem)


def _warn(job, world_size: int) -> None:
    """``job_warnings`` as ``JobWarning``s; here the device is this machine's (the ranks' on one node)."""
    from torchtitan_ext.cpu import on_cpu  # torch's device probe: after the checks that need no torch

    for message in job_warnings(job, world_size, on_cpu()):
        warnings.warn(message, JobWarning, stacklevel=3)


def check_input_files(job, world_size: int) -> None:
    """The files a run reads at start: corpus, tokenizer, initial checkpoint, custom import; and the folders
    it writes (``output_folders``)."""
    from torchtitan_ext.data.dataset_check import check_dataset
    from torchtitan_ext.data.token_checks import check_token_data
    from torchtitan_ext.data.token_sources import is_tokens
    from torchtitan_ext.data.tokenizer import check_tokenizer_assets

    dp = JobContext(job, world_size).dp
    # the tokenizer first: the tokens checks compare prepared folders with it
    check_tokenizer_assets(job.model.hf_assets_path, job.parallelism.tensor_parallel_degree)
    if is_tokens(job.training.dataset):
        check_token_data(job, "training", dp)
    else:
        check_dataset(job.training.dataset, job.training.dataset_path, "training", dp)
    if job.validation.enable and is_tokens(job.validation.dataset):
        check_token_data(job, "validation", dp)
    elif job.validation.enable:
        check_dataset(
            job.validation.dataset,
            job.validation.dataset_path,
            "validation",
            dp,
            batch_tokens=job.validation.local_batch_size * (job.validation.seq_len + 1),
        )
    if job.checkpoint.initial_load_path and not Path(job.checkpoint.initial_load_path).exists():
        refuse("checkpoint.initial_load_path", job.checkpoint.initial_load_path, "does not exist")
    module = job.experimental.custom_import
    if module:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            refuse(
                "experimental.custom_import",
                module,
                "no such module; BOOST's trainer needs none (it registers its model itself): leave it unset",
            )
    from torchtitan_ext.preflight.output_folders import check_output_folders

    check_output_folders(job)


def main(argv: list[str] | None = None) -> None:
    """``python -m torchtitan_ext.preflight --job.config_file X.toml [overrides]``: the launcher's check
    alone, at the launcher's world size (``NGPU``, default 1, times ``NNODES``, default 1); exit 2 on a refusal
    (a refused checkpoint or a held run folder exits with its message).

    Example::

        NGPU=2 python -m torchtitan_ext.preflight --job.config_file train_configs/debug.toml \\
            --parallelism.tensor_parallel_degree 2 --parallelism.data_parallel_shard_degree 1
    """
    argv = sys.argv[1:] if argv is None else argv
    try:
        if config_file_argument(argv) is None:
            # without a TOML, the [boost] section does not exist: its fields would read as unknown options
            refuse("job.config_file", None, "name the TOML to check: --job.config_file train_configs/debug.toml "
                   "(run_train.sh's default)")  # fmt: skip
        # a multi-node launch (scripts/node_train.sh) checks at its whole world size: NGPU per node × NNODES
        preflight(
            argv, process_count(os.environ.get("NGPU", "1")) * process_count(os.environ.get("NNODES", "1"))
        )
    except ConfigError as e:
        print(f"BOOST config error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
