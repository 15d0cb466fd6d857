"""What a job's ``tokens`` dataset reads: the prepared folders of its blend, their manifests, one split of each.

- training: ``training.dataset_path`` (``DIR`` or ``W1:DIR1,W2:DIR2,...``, ``boost.training.data.token_blend``),
  the ``train`` split of each folder, shuffled with ``training.dataset_seed`` (unset: ``debug.seed``,
  else 0);
- validation: ``validation.dataset_path`` in the same form, each folder's ``validation`` split where
  it has one, else its ``train`` split (a folder prepared from held-out text alone, refused where it is
  the training text); unset, the ``validation`` splits of the training folders (``--validation-fraction``
  at prepare), with the training weights.

Only manifests are read here (``boost.training.data.token_folder.read_manifest``): the preflight decides
from them, and the loaders map the splits they name.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from boost.training.config_error import refuse
from boost.training.data.token_blend import parse_blend
from boost.training.data.token_folder import PREPARE_COMMAND, Manifest, read_manifest

TOKENS = "tokens"
# torchdata's key of the dataset's own state in a StatefulDataLoader's (torchdata.stateful_dataloader.incremental_state)
DATASET_STATE = "dataset_state"
TOKEN_ORDER = "token_order"
"""The dataloader's checkpoint key (``dataloader.token_order`` in DCP): the order's state, one for all ranks."""
# Validation windows are shuffled by a key of their own, not the run's seed: runs with different seeds
# score the same text.
VALIDATION_SEED = 0


def is_tokens(dataset: str | None) -> bool:
    """Whether a ``training.dataset`` / ``validation.dataset`` name is the prepared-folder dataset."""
    return (dataset or "").lower() == TOKENS


@dataclass(frozen=True)
class TokenSource:
    folder: str
    weight: Fraction
    manifest: Manifest
    split: str
    """``train`` or ``validation``: the split of the folder this side of the run reads."""
    field: str
    """The configuration field that named the folder (refusals name it)."""

    @property
    def tokens(self) -> int:
        return self.manifest.splits[self.split].tokens

    @property
    def max_token_id(self) -> int:
        return self.manifest.splits[self.split].max_token_id


def _holds_tokens(manifest: Manifest, split: str) -> bool:
    return split in manifest.splits and manifest.splits[split].tokens > 0


def dataset_seed(job) -> int:
    """The training order's shuffle seed: ``training.dataset_seed``, else ``debug.seed``, else 0."""
    for seed in (job.training.dataset_seed, job.debug.seed):
        if seed is not None:
            return seed
    return 0


def training_sources(job) -> tuple[TokenSource, ...]:
    """The ``train`` splits a ``tokens`` training run reads; a folder that cannot serve is refused."""
    field = "training.dataset_path"
    if not job.training.dataset_path:
        refuse(
            field,
            job.training.dataset_path,
            f'dataset "tokens" reads prepared token folders: prepare your corpus ({PREPARE_COMMAND}) '
            "and set --training.dataset_path DIR",
        )
    sources = []
    for part in parse_blend(job.training.dataset_path, field):
        manifest = read_manifest(part.folder, field)
        if not _holds_tokens(manifest, "train"):
            refuse(
                field,
                part.folder,
                "its train split holds no token (every document was held out for validation?): "
                "prepare it again with a smaller --validation-fraction",
            )
        sources.append(TokenSource(part.folder, part.weight, manifest, "train", field))
    return tuple(sources)


def validation_sources(job) -> tuple[TokenSource, ...]:
    """The splits a ``tokens`` validation reads (module docstring); refused with the fix where there is none."""
    spec = job.validation.dataset_path
    if spec:
        field = "validation.dataset_path"
        training = training_sources(job) if is_tokens(job.training.dataset) else ()
        sources = []
        for part in parse_blend(spec, field):
            manifest = read_manifest(part.folder, field)
            split = "validation" if _holds_tokens(manifest, "validation") else "train"
            if not _holds_tokens(manifest, split):
                refuse(field, part.folder, "holds no token in either split: prepare held-out text into it")
            if split == "train":
                _refuse_training_text(part.folder, manifest, training)
            sources.append(TokenSource(part.folder, part.weight, manifest, split, field))
        return tuple(sources)
    if not is_tokens(job.training.dataset):
        refuse(
            "validation.dataset_path",
            spec,
            f"not set, and training.dataset = {job.training.dataset!r} has no prepared folder to hold text "
            "out of: set it to a prepared folder of held-out text",
        )
    sources = []
    for train in training_sources(job):
        if not _holds_tokens(train.manifest, "validation"):
            refuse(
                "validation.dataset_path",
                spec,
                f"not set, so validation reads the held-out split of training.dataset_path's {train.folder!r}, "
                "which has none: prepare held-out text into its own folder and set validation.dataset_path "
                "to it, or prepare the training corpus with --validation-fraction F",
            )
        sources.append(TokenSource(train.folder, train.weight, train.manifest, "validation", train.field))
    return tuple(sources)


def _refuse_training_text(folder: str, manifest: Manifest, training: tuple[TokenSource, ...]) -> None:
    """A validation folder read whole (it has no held-out split) must not be text the run trains on: one of
    the training folders, or a folder prepared from one of their input files. The loss would then score
    training windows, and nothing would say so."""
    inputs = {f.path for f in manifest.inputs}
    for train in training:
        same_folder = Path(folder).resolve() == Path(train.folder).resolve()
        shared = sorted(inputs & {f.path for f in train.manifest.inputs})
        if same_folder or shared:
            what = "is" if same_folder else f"was prepared from {shared[0]!r}, as is"
            refuse(
                "validation.dataset_path",
                folder,
                f"has no held-out split, so validation would read its train split, and it {what} "
                f"training.dataset_path's {train.folder!r}: the loss would score training text. Prepare "
                "the training corpus with --validation-fraction F (and leave validation.dataset_path unset), "
                "or prepare held-out text into its own folder",
            )
