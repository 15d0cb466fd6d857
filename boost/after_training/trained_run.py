"""A finished training run, read back for inference: its TOML, newest DCP checkpoint and tokenizer.

``load_run(config_toml, checkpoint)`` builds the ``boost.Transformer`` a run trained and fills it
from a DCP checkpoint (a ``step-N`` folder torchtitan wrote), with no process group:

- the TOML is read with ``tomllib``: ``model.flavor`` and ``boost.linear`` give the architecture;
  rank, vocabulary, layer count and grouping are read from the checkpoint's own tensor shapes and
  checked against the flavor, so a checkpoint from another config is refused with both names; what
  the shapes do not say (LaX's gate, the MLP's activation) is read from the checkpoint's record of its
  model (``boost_model.json``), else from the TOML's ``[boost]`` section over the trainer's defaults
  (``BoostOptions``); the attention mask (``boost.attn_mask_type``) from the TOML, as the run attended;
- the checkpoint is the newest intact ``step-N`` under ``job.dump_folder/checkpoint.folder`` (the
  trainer's own rule, ``boost.runtime.checkpoint_folder``, which also refuses a ``.metadata`` that would
  unpickle anything beyond DCP's records), or the step number or folder given;
- the tokenizer is ``model.hf_assets_path`` (or the deprecated ``model.tokenizer_path`` torchtitan copies over
  it) when it holds a ``tokenizer.json``, else the run's cached offline BPE (the trainer's rule too,
  ``boost.training.data.run_tokenizer.run_tokenizer_dir``).

Example::

    >>> run = load_run("train_configs/debug.toml")               # newest checkpoint of the run
    >>> ids = run.tokenizer.encode("def f(")                     # [BOS, ...] as the trainer framed text
    >>> run.model(torch.tensor([ids])).shape == (1, len(ids), run.tokenizer.vocab_size)
    True
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

from boost.after_training.job_defaults import job_value, read_run_config
from boost.runtime.checkpoint_folder import (
    checkpoint_folders,
    choose_checkpoint,
    inspect_checkpoint,
    read_model_identity,
    written_by_newer_torch,
)
from boost.training.data.run_tokenizer import (
    RunError,
    TextTokenizer,
    load_tokenizer,
    run_tokenizer_dir,
)
from boost.training.data.tokenizer_fingerprint import tokenizer_fingerprint
from boost.training.model.args import FLAVORS, ModelArgs
from boost.training.model.model import Transformer, rope_cache
from boost.training.options import BoostOptions
from boost.training.rules import KINDS, LINEAR_KINDS, shard_local_degree

logger = logging.getLogger(__name__)


@dataclass
class TrainedRun:
    model: Transformer
    tokenizer: TextTokenizer
    checkpoint: Path
    config: dict


def checkpoint_root(config: dict) -> Path:
    """``job.dump_folder / checkpoint.folder`` (torchtitan's defaults when unset)."""
    return Path(job_value(config, "job", "dump_folder")).expanduser() / job_value(
        config, "checkpoint", "folder"
    )


def find_checkpoint(
    config: dict, checkpoint: str | int | None = None, checkpoint_arg: str = "--checkpoint"
) -> Path:
    """The DCP folder to read: ``checkpoint`` as a folder, a step number, or the newest intact step.
    ``checkpoint_arg``: how the caller's CLI takes ``checkpoint`` (its messages tell the user to pass it)."""
    root = checkpoint_root(config)
    if checkpoint is None:
        step, skipped = choose_checkpoint(root)
        if step is None:
            # a newer torch's save is no damage (its reason says so)
            damage = "skipped" if any(written_by_newer_torch(r) for _, r in skipped) else "corrupt"
            why = f" ({len(skipped)} {damage}: {skipped[0][1]})" if skipped else ""
            raise RunError(
                f"no checkpoint under {root}{why}; train first (./run_train.sh) "
                f"or pass a step-N folder or a step number as {checkpoint_arg}"
            )
        for newer, reason in skipped:  # a newer step the user may expect to be read: say why it is not
            logger.warning("step-%d skipped: %s", newer, reason)
        path = root / f"step-{step}"
    elif not str(checkpoint).strip():
        raise RunError(
            f"{checkpoint_arg} is empty; pass a step-N folder or a step number, or leave it out for the newest"
        )
    # a step number in ASCII digits: str.isdigit() takes '²', which int() does not
    elif re.fullmatch(r"[0-9]+", str(checkpoint)):
        path = root / f"step-{int(checkpoint)}"
    elif re.fullmatch(r"step-\d+", str(checkpoint)) and not Path(checkpoint).is_dir():
        path = root / str(checkpoint)  # a step folder's name, under the run's checkpoint folder
    else:
        path = Path(checkpoint).expanduser()
    if not path.is_dir():
        raise RunError(
            f"{checkpoint_arg} {checkpoint}: {path} is not a folder; pass a step-N folder or a step number"
        )
    if not (path / ".metadata").exists():
        # a run's folder or its checkpoint folder, one level above the step-N folders: not a failed save
        for folder in (path, path / job_value(config, "checkpoint", "folder")):
            steps = sorted(checkpoint_folders(folder))
            if steps:
                raise RunError(
                    f"{checkpoint_arg} {path} is not a checkpoint but holds step folders under {folder} "
                    f"(step-{', step-'.join(map(str, steps))}); pass one of them or a step number"
                )
    reason = inspect_checkpoint(path)
    if reason is not None:
        raise RunError(f"{checkpoint_arg} {path} cannot be read: {reason}")
    return path


def _tensor_shapes(path: Path) -> dict[str, torch.Size]:
    metadata = dcp.FileSystemReader(str(path)).read_metadata()
    return {k: v.size for k, v in metadata.state_dict_metadata.items() if hasattr(v, "size")}


def _model_prefix(shapes: dict[str, torch.Size]) -> str:
    # torchtitan stores the model flat ("tok_embeddings.weight"); other writers prefix "model.".
    for prefix in ("", "model."):
        if f"{prefix}tok_embeddings.weight" in shapes:
            return prefix
    raise RunError("the checkpoint holds no tok_embeddings.weight: it is not a BOOST model checkpoint")


def _same_type(value, default) -> bool:
    """A TOML value of the field's type (a bool is no int; an int is a float)."""
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))


def model_args_from_run(
    config: dict,
    shapes: dict[str, torch.Size],
    source: str,
    max_seq_len: int | None = None,
    identity: dict | None = None,
) -> ModelArgs:
    """``ModelArgs`` of a run: architecture from the TOML, sizes from the checkpoint, each checked against the
    other; ``identity``: the checkpoint's record of its model (``boost_model.json``), where it has one."""
    flavor = config.get("model", {}).get("flavor")
    if flavor not in FLAVORS:
        raise RunError(
            f"{source}: model.flavor = {flavor!r} is not a BOOST flavor; choose one of {sorted(FLAVORS)}"
        )
    # the run's [boost] section over the trainer's defaults (torchtitan_ext.config merges BoostOptions alike)
    defaults = dataclasses.asdict(BoostOptions())
    boost = {**defaults, **config.get("boost", {})}
    train_len = job_value(config, "training", "seq_len")
    for field, value, default in (
        *((f"boost.{k}", boost[k], v) for k, v in defaults.items()),
        ("training.seq_len", train_len, 2048),  # the type to hold it to
    ):
        if not _same_type(value, default):
            raise RunError(
                f"{source}: {field} = {value!r} is not a {type(default).__name__}; pass the TOML this run was "
                "trained with"
            )
    linear = boost["linear"]
    if linear not in LINEAR_KINDS:
        raise RunError(f"{source}: boost.linear = {linear!r} is unknown; choose one of {LINEAR_KINDS}")
    recorded = identity or {}
    if recorded.get("linear", linear) != linear:
        raise RunError(
            f"{source}: boost.linear = {linear!r} but the checkpoint holds a {recorded['linear']!r} model; "
            "pass the TOML this run was trained with, and its overrides (--boost.linear svd)"
        )
    p = _model_prefix(shapes)
    vocab_size, dim = shapes[f"{p}tok_embeddings.weight"]
    n_layers = len({k.split(".")[1 + p.count(".")] for k in shapes if k.startswith(f"{p}layers.")})
    low_rank = f"{p}layers.0.attention.wo.down.weight" in shapes
    if low_rank != KINDS[linear].low_rank:
        raise RunError(
            f"{source}: boost.linear = {linear!r} but the checkpoint holds a {'low-rank' if low_rank else 'dense'} "
            "model; pass the TOML this run was trained with, and its overrides (--boost.linear svd)"
        )
    # not in the weights' shapes: the checkpoint's record, else the run's [boost] section as the trainer read it
    overrides = {
        "n_layers": n_layers,
        "only_lr_act": recorded.get("only_lr_act", boost["only_lr_act"]),
        "lax_gate": recorded.get("lax_gate", boost["lax_gate"]),
        "attn_mask_type": boost["attn_mask_type"],  # how the run attended (sdpa here: a CPU computes it)
    }
    if low_rank:
        overrides["rank"] = shapes[f"{p}layers.0.attention.wo.down.weight"][0]
        overrides["group_linears"] = f"{p}layers.0.attention.wqkv.down.weight" in shapes
    args = ModelArgs.from_flavor(
        flavor,
        linear=linear,
        vocab_size=vocab_size,
        max_seq_len=max(train_len, max_seq_len or 0),
        **overrides,
    )
    if args.dim != dim or n_layers != FLAVORS[flavor].n_layers:
        raise RunError(
            f"{source}: flavor {flavor!r} has dim {args.dim} and {FLAVORS[flavor].n_layers} layers, the checkpoint "
            f"dim {dim} and {n_layers} layers; pass the TOML this run was trained with, and its overrides "
            "(--model.flavor 60M)"
        )
    return args


def _read_identity(path: Path) -> dict | None:
    try:
        return read_model_identity(path)
    except ValueError as e:
        raise RunError(str(e)) from None


def load_checkpoint_model(
    path: Path, config: dict, source: str, max_seq_len: int | None = None
) -> Transformer:
    """A ``Transformer`` holding the model weights of the DCP checkpoint at ``path`` (no process group)."""
    return _load_model(path, config, source, max_seq_len, _read_identity(path))


def _load_model(
    path: Path, config: dict, source: str, max_seq_len: int | None, identity: dict | None
) -> Transformer:
    shapes = _tensor_shapes(path)
    args = model_args_from_run(config, shapes, source, max_seq_len, identity)
    with torch.device("meta"):
        model = Transformer(args)
    model.to_empty(device="cpu")
    model.rope = rope_cache(args.head_dim, args.max_seq_len, args.rope_theta)
    prefix = _model_prefix(shapes)
    state = {prefix + k: v for k, v in model.state_dict().items()}
    missing = sorted(k for k in state if k not in shapes)
    if missing:
        raise RunError(
            f"{path}: the checkpoint lacks {len(missing)} model tensor(s) the config implies, e.g. {missing[:3]}"
        )
    # and holds none the config leaves out (a LaX gate read as lax_gate = "none" would drop it unread);
    # the model's tensors are those under its own top-level names (the optimizer's and others are not)
    roots = {prefix + k.split(".")[0] + "." for k in model.state_dict()}
    extra = sorted(k for k in shapes if k.startswith(tuple(roots)) and k not in state)
    if extra:
        raise RunError(
            f"{path}: the checkpoint holds {len(extra)} model tensor(s) the config does not build, e.g. "
            f"{extra[:3]}; pass the TOML this run was trained with, and its overrides (--boost.linear svd)"
        )
    wrong = [k for k, v in state.items() if tuple(shapes[k]) != tuple(v.shape)]
    if wrong:
        k = wrong[0]
        raise RunError(
            f"{path}: tensor {k} has shape {tuple(shapes[k])}, the config implies {tuple(state[k].shape)}"
        )
    with warnings.catch_warnings():
        # "torch.distributed is ... uninitialized, assuming ... a single process": exactly the intent.
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        dcp.load(state, checkpoint_id=str(path))  # fills the model's tensors in place
    return model.eval()


def load_run(
    config_toml: str | Path,
    checkpoint: str | int | None = None,
    tokenizer_dir: str | Path | None = None,
    max_seq_len: int | None = None,
    overrides: Sequence[str] = (),
    checkpoint_arg: str = "--checkpoint",
) -> TrainedRun:
    """The model and tokenizer of a training run (see the module docstring for what is read where).

    Args:
        config_toml: the run's TOML (``train_configs/debug.toml``).
        checkpoint: a ``step-N`` folder, a step number, or ``None`` for the newest intact one.
        tokenizer_dir: overrides the run's tokenizer folder.
        max_seq_len: positions the RoPE table must cover, if more than the run's ``training.seq_len``.
        overrides: the ``--section.field value`` overrides the run was started with, over the TOML.
        checkpoint_arg: the caller's CLI's name for ``checkpoint``, which its refusals tell the user to pass.
    """
    config = read_run_config(config_toml, overrides)
    path = find_checkpoint(config, checkpoint, checkpoint_arg)
    identity = _read_identity(path)
    model = _load_model(path, config, str(config_toml), max_seq_len, identity)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))  # shard_for_inference's processes
    config.setdefault("boost", {})["norm"] = inference_norm(config, identity, world_size, str(path))
    tokenizer = load_tokenizer(tokenizer_dir or run_tokenizer_dir(config))
    if tokenizer.vocab_size != model.model_args.vocab_size:
        raise RunError(
            f"tokenizer {tokenizer.folder} has {tokenizer.vocab_size} tokens, the checkpoint's embedding "
            f"{model.model_args.vocab_size}; pass --tokenizer with the run's tokenizer folder"
        )
    # the size alone does not make it the run's: a retrained BPE of the same size maps ids to other text
    recorded = (identity or {}).get("tokenizer")
    given = tokenizer_fingerprint(tokenizer.folder) if recorded is not None else None
    if given != recorded:
        raise RunError(
            f"tokenizer {tokenizer.folder} ({given[:19]}…) is not the one "
            f"{path} was trained with ({recorded[:19]}…): its ids would mean other text; pass --tokenizer with "
            "the run's tokenizer folder"
        )
    return TrainedRun(model, tokenizer, path, config)


def inference_norm(config: dict, identity: dict | None, world_size: int, source: str) -> str:
    """The ``boost.norm`` inference shards with: as the checkpoint records its pre-norms (shard-local over its
    TP degree, or exact), else the TOML's. A shard-local run is a different model for each TP degree: on
    another number of processes it is refused, naming the one it needs.

    Example::

        >>> inference_norm({"boost": {"norm": "local"}}, {"rms_norm": "exact"}, 2, "step-9")  # trained at tp 1
        'online'
    """
    norm = config.get("boost", {}).get("norm", BoostOptions.norm)
    if identity is None or "rms_norm" not in identity:
        return norm  # a checkpoint that records none: the TOML's, as the run was started
    degree = shard_local_degree(identity["rms_norm"])
    if degree is None:
        return "online" if norm == "local" else norm  # exact: any exact mode computes it
    if degree != world_size:
        raise RunError(
            f"{source}: trained with boost.norm = 'local' over {degree} tensor-parallel ranks, a different model "
            f"for each TP degree; run it on {degree} processes (torchrun --nproc_per_node {degree}), not {world_size}"
        )
    return "local"


def shard_for_inference(model: Transformer, config: dict) -> int:
    """Shard ``model`` over all processes (``torchrun --nproc_per_node T``, or an initialised group); return the rank.

    BTP for every low-rank kind (whatever scheme the run trained with: the weights are the same),
    Megatron for the dense one, on CPU processes with gloo. Logits come back replicated (no
    loss-parallel), so every rank samples the same token from the same generator and scores the
    same loss. With one process nothing is done. ``config``'s ``boost.norm``: ``load_run``'s, as the
    checkpoint records the run's pre-norms (``inference_norm``).
    """
    import torch.distributed as dist

    if not dist.is_initialized():
        if int(os.environ.get("WORLD_SIZE", "1")) == 1:
            return 0
        dist.init_process_group("gloo")
    if dist.get_world_size() == 1:
        return dist.get_rank()
    from torch.distributed.device_mesh import init_device_mesh

    from boost.training.parallel import apply_tp

    world = dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    try:
        apply_tp(
            model,
            mesh,
            scheme=KINDS[model.model_args.linear].tp_scheme,
            norm=config.get("boost", {}).get("norm", "online"),
            loss_parallel=False,
        )
    except ValueError as e:  # a shape check, worded for the trainer's fields: say what it means here
        raise RunError(
            f"{world} processes shard the model {world} ways, and it does not split so ({e}); run "
            "torchrun --nproc_per_node with a count that divides its heads, or one process"
        ) from None
    return dist.get_rank()
