"""The trainer's resume guard: the checkpoint torchtitan loads is the right one, intact, holding this job's model.

torchtitan resumes from the highest ``step-N`` folder under ``job.dump_folder/checkpoint.folder``
that has a ``.metadata`` file. Before the trainer starts, every rank (read-only, so no coordination
is needed) picks instead the newest *intact* checkpoint by ``boost.runtime.checkpoint_folder``'s rules (the
folder name, the ``.metadata`` allowlist, the data files, the weights-only items) into a ``ResumePlan``,
which the checkpoint manager loads, so torchtitan loads exactly what was checked; the job
configuration is read, never written. Each skipped
checkpoint is named with its reason, and nothing is deleted or overwritten. The chosen checkpoint's
recorded model (``checkpoint_identity.py``) must be the job's: resuming into another model is
refused, naming each differing field; so is a ``tokens`` data position in another order than the
job's (``torchtitan_ext.data.token_checks``). ``check_resume`` runs all of it in ``run_train.sh``'s
preflight, before any process starts; ``prepare_resume`` again in each rank of the trainer.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from boost.runtime.checkpoint_folder import (
    MODEL_ONLY,
    checkpoint_folders,
    choose_checkpoint,
    inspect_checkpoint,
    read_bytes_item,
    read_metadata,
    read_model_identity,
    resume_problem,
    written_by_newer_torch,
)
from boost.training.rules import data_parallel_degree
from torchtitan_ext.data.token_checks import token_order_problem
from torchtitan_ext.data.token_sources import TOKEN_ORDER, is_tokens
from torchtitan_ext.guards.checkpoint_identity import (
    describe_differences,
    identity_differences,
    planned_model_identity,
    unrecorded_fields,
)
from torchtitan_ext.guards.run_lock import check_run_folder_free


class CheckpointRefused(SystemExit):
    """The job must not load the checkpoint it would resume from; the message says why and the ways
    out. A ``SystemExit``: uncaught, it prints the message alone (no traceback) and ends the process."""


def resume_checkpoint(job) -> tuple[Path | None, int | None, list[tuple[int, str]]]:
    """What the trainer will load: ``(folder, step, skipped newer steps)``.

    ``step`` is set for a checkpoint of this run folder; ``folder`` alone for
    ``checkpoint.initial_load_path`` (which torchtitan reads only while the run's checkpoint folder
    does not exist); ``(None, None, [])`` for a fresh start. Raises ``CheckpointRefused`` for a
    ``load_step`` that is missing, broken or holds the model alone, a folder with no checkpoint to resume
    from, and an initial checkpoint that is broken or would be ignored.
    """
    ckpt = job.checkpoint
    if not ckpt.enable or ckpt.create_seed_checkpoint:
        return None, None, []
    folder = Path(job.job.dump_folder) / ckpt.folder
    if ckpt.load_step != -1:
        path = folder / f"step-{ckpt.load_step}"
        if not path.is_dir():
            steps = sorted(checkpoint_folders(folder))
            fix = (
                f"the steps saved there are {steps}: pass one of those, or -1 for the newest"
                if steps
                else "it holds no checkpoint: leave checkpoint.load_step at -1 to start from scratch"
            )
            raise CheckpointRefused(
                f"BOOST checkpoint error: checkpoint.load_step = {ckpt.load_step}: there is no checkpoint "
                f"{path.name} in {folder}; {fix}"
            )
        reason = resume_problem(path, ckpt.load_step)
        if reason == MODEL_ONLY:
            reason += (
                f"; to train a new run from its weights, set checkpoint.initial_load_path = {path} {_NEW_RUN}"
            )
        if reason is not None:
            raise CheckpointRefused(
                f"BOOST checkpoint error: checkpoint.load_step = {ckpt.load_step}: {path}: {reason}"
            )
        return path, ckpt.load_step, []
    initial = _initial_load(ckpt)
    if not folder.exists():
        return (_checked_initial(initial, ckpt), None, []) if initial else (None, None, [])
    step, skipped = choose_checkpoint(folder, resume=True)
    newer_torch = [(bad, reason) for bad, reason in skipped if written_by_newer_torch(reason)]
    if newer_torch:  # no damage: resuming an older step (or none) would train over it
        bad, reason = newer_torch[0]
        instead = f"resume from step {step}" if step is not None else "start from scratch"
        raise CheckpointRefused(
            f"BOOST checkpoint error: {folder / f'step-{bad}'} was {reason}; or move it away to {instead}"
        )
    if step is None and not skipped and initial:
        # torchtitan then warns that the folder exists and trains from random weights
        raise CheckpointRefused(
            f"BOOST checkpoint error: {initial} is read only while the run's checkpoint folder does not "
            f"exist, and {folder} exists, holding no checkpoint: this run would start from random weights; "
            "move that folder away to start from the initial checkpoint"
        )
    if step is None and skipped:
        model_only = [bad for bad, reason in skipped if reason == MODEL_ONLY]
        if model_only:
            newest = folder / f"step-{model_only[0]}"
            raise CheckpointRefused(
                f"BOOST checkpoint error: no checkpoint in {folder} to resume from: {newest}: {MODEL_ONLY}; to "
                f"train a new run from its weights, set checkpoint.initial_load_path = {newest} {_NEW_RUN}"
            )
        raise CheckpointRefused(
            f"BOOST checkpoint error: no intact checkpoint in {folder} ({len(skipped)} corrupt: step "
            f"{skipped[0][0]}: {skipped[0][1]}); move them away to start from scratch"
        )
    return (folder / f"step-{step}" if step is not None else None), step, skipped


# How to start from a checkpoint of another run (torchtitan reads checkpoint.initial_load_path only then)
_NEW_RUN = "with a new job.dump_folder (it is read only while the run's checkpoint folder does not exist)"


def _initial_load(ckpt) -> str | None:
    """The field and value naming what torchtitan loads while the run's checkpoint folder does not exist."""
    if ckpt.initial_load_path:
        return f"checkpoint.initial_load_path = {ckpt.initial_load_path}"
    return (
        "checkpoint.initial_load_in_hf (model.hf_assets_path's weights)" if ckpt.initial_load_in_hf else None
    )


def _checked_initial(initial: str, ckpt) -> Path | None:
    """The DCP checkpoint ``checkpoint.initial_load_path`` names, checked as a resume's is; ``None`` for
    Hugging Face weights, which torchtitan reads and checks itself."""
    if ckpt.initial_load_in_hf:
        return None
    path = Path(ckpt.initial_load_path)
    steps = sorted(checkpoint_folders(path))
    if not path.is_dir():
        reason = "not a folder: name a checkpoint's step-N folder"
    elif steps:  # a run's checkpoint folder, not one of its checkpoints
        reason = (
            f"a run's checkpoint folder (holding {', '.join(f'step-{s}' for s in steps)}): name one of them"
        )
    elif ckpt.initial_load_model_only:
        reason = inspect_checkpoint(path)
    else:  # loaded as a full checkpoint, optimizer and training state included
        reason = resume_problem(path, None)
    if reason is not None:
        raise CheckpointRefused(f"BOOST checkpoint error: {initial}: {reason}")
    return path


def check_model_identity(checkpoint: Path, job) -> str | None:
    """Refuse (``CheckpointRefused``) if ``checkpoint`` holds another model than ``job`` builds.

    Returns a warning when the checkpoint could not be checked in full — it records no identity, or
    not the tokenizer (written before BOOST recorded them): it is accepted, and the caller warns.
    """
    try:
        saved = read_model_identity(checkpoint)
    except ValueError as e:
        raise CheckpointRefused(f"BOOST checkpoint error: {e}") from None
    if saved is None:
        return (
            f"{checkpoint} records no model identity (written before BOOST recorded one); resuming "
            "without checking that it holds the model this job asks for"
        )
    wanted = planned_model_identity(job)
    if wanted is None:  # not a BOOST model: nothing to compare with
        return None
    differences = identity_differences(saved, wanted)
    if differences:
        raise CheckpointRefused("BOOST checkpoint error: " + describe_differences(checkpoint, differences))
    unrecorded = unrecorded_fields(saved, wanted)
    if unrecorded:
        return (
            f"{checkpoint} records no {', '.join(unrecorded)} (written before BOOST recorded it); resuming "
            "without checking it: the tokenizer must be the one the checkpoint was trained with"
        )
    return None


def check_resume(job) -> None:
    """``run_train.sh``'s preflight: refuse, before any process starts, a run folder held by a live
    trainer, a missing or broken ``load_step``, a checkpoint of another model, and a ``tokens`` data
    position in another order than the job's."""
    check_run_folder_free(job.job.dump_folder)
    path, step, _ = resume_checkpoint(job)
    if path is not None:
        check_model_identity(path, job)
    if path is not None and _loads_data_position(job, step):
        check_token_order(path, job)
    if path is not None and _loads_optimizer(job, step):
        check_optimizer_kind(path, job)


def _loads_optimizer(job, step: int | None) -> bool:
    # as the data position: a resume (not an initial load, not the seed checkpoint) that loads it
    return step not in (None, 0) and "optimizer" not in job.checkpoint.exclude_from_loading


def saved_optimizer_kind(checkpoint: Path) -> str | None:
    """Whose state the checkpoint's optimizer holds: ``"LORO"`` (its groups keep the factor lists),
    ``"Adam/AdamW"`` (torch's, whose groups keep ``amsgrad``), or ``None`` where it holds neither."""
    groups = [
        k for k in read_metadata(checkpoint).state_dict_metadata if k.startswith("optimizer.param_groups.")
    ]
    if any(k.endswith(".factors") for k in groups):
        return "LORO"
    if any(k.endswith(".amsgrad") for k in groups):
        return "Adam/AdamW"
    return None


def check_optimizer_kind(checkpoint: Path, job) -> None:
    """Refuse (``CheckpointRefused``) a resume whose optimizer state is another optimizer's: DCP would stop
    every rank on a missing key or a metadata type it cannot load into."""
    saved = saved_optimizer_kind(checkpoint)
    wanted = "LORO" if job.optimizer.name == "LORO" else "Adam/AdamW"
    if saved is None or saved == wanted:
        return
    raise CheckpointRefused(
        f"BOOST checkpoint error: {checkpoint} holds {saved}'s optimizer state, and this job's "
        f"optimizer.name = {job.optimizer.name!r} keeps another: resume with the checkpoint's optimizer, or "
        "start a fresh optimizer and schedule with --checkpoint.exclude_from_loading optimizer,lr_scheduler "
        "(the model, step and data position still resume), or train in a new --job.dump_folder"
    )


def _loads_data_position(job, step: int | None) -> bool:
    # initial loads and the seed checkpoint (step 0) load the model only
    return step not in (None, 0) and "dataloader" not in job.checkpoint.exclude_from_loading


def check_token_order(checkpoint: Path, job) -> None:
    """Refuse (``CheckpointRefused``) a ``tokens`` job resuming a global position of another order."""
    if is_tokens(job.training.dataset) and saved_data_position(checkpoint) == TOKEN_POSITION:
        problem = token_order_problem(checkpoint, job)
        if problem:
            raise CheckpointRefused(f"BOOST checkpoint error: {problem}")


# How a checkpoint keeps its data position: one per data-parallel rank (torchtitan's, the text datasets),
# or one global position for all ranks (the tokens dataset, torchtitan_ext.data.token_loader).
RANK_POSITIONS, TOKEN_POSITION = "one per data-parallel rank", "the tokens dataset's global position"


def saved_data_position(checkpoint: Path) -> str | None:
    """``RANK_POSITIONS``, ``TOKEN_POSITION``, or ``None`` for a checkpoint without dataloader state."""
    keys = read_metadata(checkpoint).state_dict_metadata
    if f"dataloader.{TOKEN_ORDER}" in keys:
        return TOKEN_POSITION
    return RANK_POSITIONS if any(key.startswith("dataloader.dp_rank_") for key in keys) else None


def saved_data_parallel_degree(checkpoint: Path) -> int | None:
    """The data-parallel degree the intact checkpoint's dataloader state was written at; ``None`` if it
    holds no dataloader state."""
    if saved_data_position(checkpoint) == TOKEN_POSITION:
        return read_bytes_item(checkpoint, "dataloader.world_size")
    keys = read_metadata(checkpoint).state_dict_metadata
    degree = sum(1 for key in keys if key.startswith("dataloader.dp_rank_"))
    return degree or None


def job_data_parallel_degree(job, world_size: int) -> int:
    """How many different batches a step of ``job`` reads at ``world_size`` (``boost.training.rules``)."""
    par = job.parallelism
    return data_parallel_degree(
        world_size,
        tp=par.tensor_parallel_degree,
        pp=par.pipeline_parallel_degree,
        cp=par.context_parallel_degree,
        dp_replicate=par.data_parallel_replicate_degree,
        dp_shard=par.data_parallel_shard_degree,
    )


@dataclass(frozen=True)
class ResumePlan:
    """What the trainer loads, derived once from the job and its checkpoint folder (the job is left as read).

    Attributes:
        step: the step folder of this run to load; -1 for none of them (a fresh start, or
            ``checkpoint.initial_load_path``, which torchtitan reads while the run has no checkpoint folder).
        skip_dataloader: the data position is not loaded: a text dataset's, saved at another data-parallel
            degree, or one of another kind of dataset than the job's.
        warnings: what rank 0 said about the choice (skipped checkpoints, an unchecked identity, the data).
    """

    step: int = -1
    skip_dataloader: bool = False
    warnings: tuple[str, ...] = ()


def prepare_resume(job, world_size: int) -> ResumePlan:
    """In every rank before torchtitan's trainer starts: choose the checkpoint to load, refuse another
    model's or another ``tokens`` order's, and let a text dataset at a new data-parallel degree resume
    without its data position (the ``tokens`` order continues at any degree).

    Messages print on rank 0 as they are found; refusals raise ``CheckpointRefused`` on every rank.
    """
    rank0 = os.environ.get("RANK", "0") == "0"
    said: list[str] = []

    def say(message: str) -> None:
        said.append(message)
        if rank0:
            print(f"BOOST: {message}", file=sys.stderr, flush=True)

    path, step, skipped = resume_checkpoint(job)
    folder = Path(job.job.dump_folder) / job.checkpoint.folder
    for bad, reason in skipped:
        # the run's own save of that step would write over it (torchtitan saves into the step's folder)
        keep = f"; if this run saves step {bad}, that save replaces it: copy it elsewhere to keep it"
        say(f"skipping checkpoint {folder / f'step-{bad}'}: {reason}{keep if reason == MODEL_ONLY else ''}")
    if skipped:
        say(f"resuming from the newest checkpoint to resume from, step {step}")
    load_step = -1 if step is None else step
    if path is None:
        return ResumePlan(step=load_step, warnings=tuple(said))
    unchecked = check_model_identity(path, job)
    if unchecked:
        say(f"warning: {unchecked}")
    if not _loads_data_position(job, step):
        return ResumePlan(step=load_step, warnings=tuple(said))
    check_token_order(path, job)
    kind, wanted = (
        saved_data_position(path),
        TOKEN_POSITION if is_tokens(job.training.dataset) else RANK_POSITIONS,
    )
    saved, now = saved_data_parallel_degree(path), job_data_parallel_degree(job, world_size)
    if kind is not None and kind != wanted:
        say(
            f"warning: the checkpoint's data position is {kind}, this job's dataset "
            f"(training.dataset = {job.training.dataset!r}) keeps {wanted}: the data starts from its beginning "
            "(model, optimizer, LR schedule and step resume)"
        )
        return ResumePlan(step=load_step, skip_dataloader=True, warnings=tuple(said))
    if kind == TOKEN_POSITION:
        if saved != now:
            say(
                f"the data-parallel degree changed from {saved} (checkpoint) to {now}: the tokens dataset's "
                "global order continues at its saved sample, each rank reading its part of the next global batch"
            )
        return ResumePlan(step=load_step, warnings=tuple(said))
    moved = saved is not None and saved != now
    if moved:
        # torchtitan keeps one data position per DP rank and cannot reshard them (it asserts); model,
        # optimizer, LR schedule and step reshard through DCP.
        say(
            f"warning: the data-parallel degree changed from {saved} (checkpoint) to {now}: the data position "
            "cannot be resharded, so every data-parallel rank starts its shard of the data from its beginning "
            "(model, optimizer, LR schedule and step resume)"
        )
    return ResumePlan(step=load_step, skip_dataloader=moved, warnings=tuple(said))
