"""torchtitan's ``CheckpointManager`` with BOOST's model identity and one rule for checkpoint folders.

Three changes to torchtitan 0.2.2's manager, each in the method that owns the behaviour:

- ``dcp_save``: rank 0 writes ``boost_model.json`` (``checkpoint_identity.py``) into the step folder
  before DCP writes its ``.metadata``, so every completed checkpoint records the model it holds.
- ``_find_load_step`` and ``_purge_stale_checkpoints`` use ``boost.runtime.checkpoint_folder.checkpoint_step``
  (folders named exactly ``step-N``). torchtitan's versions ``re.search`` the name, so a backup
  ``keep-step-500`` was taken for step 500 and deleted by ``keep_latest_k``. The purge keeps the newest
  ``keep_latest_k`` *intact* checkpoints and deletes only intact ones: torchtitan counted an unfinished
  folder as one of them, and deleted an intact one in its place.
- ``_save_last_step``: torchtitan's ``save`` returns right after the last step's save, before its
  purge, so every run that ends on a save kept ``keep_latest_k + 1`` checkpoints (4 with
  ``keep_latest_k = 3`` after a resume); the purge now follows that save too.

- ``load``: the step of the trainer's ``ResumePlan`` (``checkpoint_guard.prepare_resume``), without
  the data position when the plan skips it, so the job configuration stays as it was read.

And one addition, ``save_at_stop``: a full checkpoint of the current step whatever the interval, for a
run stopped by a signal (``graceful_stop.py``).

torchtitan 0.2.2's ``Trainer.__init__`` builds its ``CheckpointManager`` itself, with no hook to choose
the class. ``BoostCheckpointManager.adopt`` turns that instance into this class (as FSDP2's
``fully_shard`` swaps a module's class), so the manager is built once: one purge thread, one async
process group, nothing to close and rebuild. The subclass adds methods and three attributes, no state
of torchtitan's.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import torch.distributed as dist
from torchtitan.components.checkpoint import DATALOADER, CheckpointManager

from boost.runtime.checkpoint_folder import checkpoint_folders, checkpoint_step, inspect_checkpoint
from torchtitan_ext.guards.checkpoint_guard import ResumePlan
from torchtitan_ext.guards.checkpoint_identity import write_identity
from torchtitan_ext.startup_clock import STARTUP


class BoostCheckpointManager(CheckpointManager):
    """``CheckpointManager`` that loads a ``ResumePlan`` and records ``model_identity`` with every
    checkpoint (see module docstring). Made by ``adopt`` from the manager torchtitan's trainer built."""

    model_identity: dict | None
    resume_plan: ResumePlan

    @classmethod
    def adopt(
        cls, manager: CheckpointManager, *, model_identity: dict | None, resume_plan: ResumePlan
    ) -> BoostCheckpointManager:
        """``manager``, now of this class, with what it records and what it loads.

        Args:
            manager: the ``CheckpointManager`` torchtitan's ``Trainer.__init__`` built (not yet used).
            model_identity: ``checkpoint_identity.model_identity`` of the trained model (``None``: none).
            resume_plan: what ``load`` loads (``checkpoint_guard.prepare_resume``).
        """
        manager.__class__ = cls
        adopted = cast(BoostCheckpointManager, manager)
        adopted.model_identity = model_identity
        adopted.resume_plan = resume_plan
        adopted._saved_step = -1
        adopted._forced = False
        if adopted.enable and resume_plan.skip_dataloader:
            # a list of its own: the job's checkpoint.exclude_from_loading is left as read
            adopted.exclude_from_loading = [*adopted.exclude_from_loading, DATALOADER]
        return adopted

    def load(self, step: int = -1) -> bool:
        """Load the plan's step. torchtitan's trainer passes ``checkpoint.load_step``, from which the
        plan was derived (the step it names, or the newest intact one for -1)."""
        with STARTUP.timing("checkpoint load"):
            return super().load(step=self.resume_plan.step)

    def save(self, curr_step: int, last_step: bool = False) -> None:
        if self._should_save(curr_step, last_step):
            self._saved_step = curr_step
        super().save(curr_step, last_step)

    def _should_save(self, curr_step: int, last_step: bool = False) -> bool:
        if self._forced and self.enable and not self.load_only:
            return True
        return super()._should_save(curr_step, last_step)

    def save_at_stop(self, step: int) -> bool:
        """Make ``step`` a complete checkpoint (unless the interval just saved it); ``False`` when
        checkpointing is off. Not torchtitan's ``last_step`` save, which may keep the model alone: a
        stopped run must resume with its optimizer and data position."""
        if not self.enable or self.load_only:
            return False
        if self._saved_step != step:
            self._forced = True
            try:
                self.save(step)
            finally:
                self._forced = False
        self._async_wait()  # an async save must be on disk before the process ends
        return True

    def dcp_save(
        self,
        state_dict,
        checkpoint_id: str,
        async_mode,
        enable_garbage_collection: bool = False,
        to_hf: bool = False,
    ):
        path = Path(checkpoint_id)
        step = checkpoint_step(path.name)
        # only the run's own step folders (not torchft's per-replica dataloader folders)
        if (
            self.model_identity is not None
            and step is not None
            and path.parent == Path(self.folder)
            and dist.get_rank() == 0
        ):
            write_identity(path, self.model_identity, step)
        return super().dcp_save(state_dict, checkpoint_id, async_mode, enable_garbage_collection, to_hf)

    def _save_last_step(self, curr_step: int) -> None:
        super()._save_last_step(curr_step)
        self._purge_stale_checkpoints()

    def _find_load_step(self, folder: str = "") -> int:
        found = checkpoint_folders(Path(folder or self.folder))
        intact = [step for step, path in found.items() if (path / ".metadata").is_file()]
        return max(intact, default=-1)

    def _purge_stale_checkpoints(self) -> None:
        if self.keep_latest_k <= 0 or dist.get_rank() != 0:
            return
        if self.enable_ft_dataloader_checkpoints and not (
            self.ft_manager and self.ft_manager.participating_rank() == 0
        ):
            return
        # keep_latest_k counts intact checkpoints: an unfinished or corrupt folder would take the place of
        # one, and the intact ones behind it be deleted. Only intact ones are purged; the others are left
        # for the user (the resume guard names each it skips), an unfinished async save among them.
        found = checkpoint_folders(Path(self.folder))
        intact = sorted(step for step, path in found.items() if inspect_checkpoint(path) is None)
        for step in intact[: -self.keep_latest_k]:
            self.purge_queue.put(str(found[step]))
