"""Refuse a bad job before any process group, tokenizer, model or checkpoint is touched.

``check_job(argv, world_size)`` parses the command line and TOML the way torchtitan does and checks
every ``[boost]`` field and parallelism combination; a ``ConfigError`` names the field, the value and
the fix. ``torchtitan_ext.train`` runs it first; each rule has a test (tests/test_validate.py), and
the table in docs/config_errors.md lists them.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

import torchtitan_ext.cpu  # noqa: F401,I001  (before any torchtitan import, as in the trainer)
from boost.model.args import FLAVOURS, LINEAR_KINDS, ModelArgs
from boost.parallel.plans import TP_SCHEMES
from boost.parallel.styles import NORM_MODES

AC_MODES = ("none", "full", "lowrank")


class ConfigError(ValueError):
    """A configuration that cannot run, with the field to change and how."""


def _fail(field: str, value, fix: str):
    raise ConfigError(f"{field} = {value!r}: {fix}")


def check_toml(path: str) -> None:
    if not Path(path).is_file():
        _fail("job.config_file", path, "no such file; pass an existing TOML (see train_configs/)")
    try:
        with open(path, "rb") as f:
            tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: TOML syntax error: {e} — fix the file at that line") from None


def check_job(argv: list[str], world_size: int | None = None):
    """Parse ``argv`` as torchtitan would and validate it; return the ``JobConfig``."""
    from torchtitan.config import ConfigManager

    for i, arg in enumerate(argv):
        if arg.split("=")[0] in ("--job.config_file", "--job.config-file"):
            check_toml(arg.split("=", 1)[1] if "=" in arg else argv[i + 1])
    job = ConfigManager().parse_args(argv)
    check_config(job, world_size if world_size is not None else int(os.environ.get("WORLD_SIZE", "1")))
    return job


def check_config(job, world_size: int) -> None:
    """Raise ``ConfigError`` for the first thing that cannot work; warn for what works but misleads."""
    if not hasattr(job, "boost"):
        _fail("job.custom_config_module", job.job.custom_config_module, 'set it to "torchtitan_ext.config"')
    b, par, tr = job.boost, job.parallelism, job.training
    if job.model.name == "boost_llama" and job.model.flavor not in FLAVOURS:
        _fail("model.flavor", job.model.flavor, f"choose one of {list(FLAVOURS)}")
    if b.linear not in LINEAR_KINDS:
        _fail("boost.linear", b.linear, f"choose one of {LINEAR_KINDS}")
    if b.norm not in NORM_MODES:
        _fail("boost.norm", b.norm, f"choose one of {NORM_MODES}")
    if b.tp_scheme not in TP_SCHEMES:
        _fail("boost.tp_scheme", b.tp_scheme, f"choose one of {TP_SCHEMES}")
    if b.activation_checkpoint not in AC_MODES:
        _fail("boost.activation_checkpoint", b.activation_checkpoint, f"choose one of {AC_MODES}")
    if b.tokenizer_vocab_size < 256 + 2:
        _fail("boost.tokenizer_vocab_size", b.tokenizer_vocab_size, "a byte-level BPE needs at least 258 tokens")

    args = ModelArgs.from_flavour(job.model.flavor) if job.model.flavor in FLAVOURS else None
    if args is not None and b.linear != "full":
        rank = b.rank if b.rank else round(b.rank_ratio * args.dim)
        if b.rank < 0:
            _fail("boost.rank", b.rank, "must be positive (or 0 to use boost.rank_ratio)")
        if not b.rank and not 0 < b.rank_ratio < 1:
            _fail("boost.rank_ratio", b.rank_ratio, "must lie in (0, 1); the paper uses 0.25")
        smallest = min(args.dim, args.kv_heads * args.head_dim)
        if not 0 < rank < smallest:
            _fail("boost.rank", rank, f"must be below the smallest dim it factors ({smallest}) for flavour {job.model.flavor}")

    degrees = {
        "parallelism.tensor_parallel_degree": par.tensor_parallel_degree,
        "parallelism.pipeline_parallel_degree": par.pipeline_parallel_degree,
        "parallelism.data_parallel_replicate_degree": par.data_parallel_replicate_degree,
        "parallelism.context_parallel_degree": par.context_parallel_degree,
    }
    for field, value in degrees.items():
        if value < 1:
            _fail(field, value, "must be at least 1")
    shard = par.data_parallel_shard_degree
    others = 1
    for value in degrees.values():
        others *= value
    if shard == -1:
        if world_size % others:
            _fail("parallelism", f"tp×pp×dp_replicate×cp = {others}", f"must divide the world size {world_size} (NGPU)")
    elif shard < 1 or shard * others != world_size:
        _fail(
            "parallelism.data_parallel_shard_degree", shard,
            f"tp×pp×dp_replicate×cp×dp_shard = {others * max(shard, 0)} must equal the world size {world_size} "
            "(NGPU); set data_parallel_shard_degree = -1 to fill the rest",
        )

    t = par.tensor_parallel_degree
    if args is not None:
        if t > 1:
            if b.linear == "full" and b.tp_scheme != "megatron":
                _fail("boost.tp_scheme", b.tp_scheme, 'the dense model (linear = "full") uses tp_scheme = "megatron"')
            if b.linear != "full" and b.tp_scheme == "megatron":
                _fail("boost.tp_scheme", b.tp_scheme, 'megatron is the dense baseline; use "btp" or "vanilla" for low-rank kinds')
            for name in ("n_heads", "kv_heads", "dim", "ffn_dim"):
                value = getattr(args, name)
                if value % t:
                    _fail("parallelism.tensor_parallel_degree", t, f"must divide {name} = {value} of flavour {job.model.flavor}")
            if b.tokenizer_vocab_size % t and not job.model.hf_assets_path:
                _fail("boost.tokenizer_vocab_size", b.tokenizer_vocab_size, f"must be divisible by the TP degree {t}")
        if tr.seq_len % (t * 2 * par.context_parallel_degree if par.context_parallel_degree > 1 else 1):
            _fail("training.seq_len", tr.seq_len, "must be divisible by tp × 2 × cp when context parallel is on")
        pp = par.pipeline_parallel_degree
        if pp > 1:
            if pp > args.n_layers:
                _fail("parallelism.pipeline_parallel_degree", pp, f"more stages than the {args.n_layers} layers of {job.model.flavor}")
            if b.linear == "lax":
                _fail("parallelism.pipeline_parallel_degree", pp, "lax carries latents across blocks: use 1, or another boost.linear")
    if tr.seq_len < 2:
        _fail("training.seq_len", tr.seq_len, "must be at least 2")
    if tr.local_batch_size < 1:
        _fail("training.local_batch_size", tr.local_batch_size, "must be at least 1")
    if tr.steps < 1:
        _fail("training.steps", tr.steps, "must be at least 1")

    if tr.dataset == "local":
        from torchtitan_ext.data import local_text_files

        try:
            local_text_files(tr.dataset_path)
        except (ValueError, FileNotFoundError) as e:
            raise ConfigError(str(e)) from None
    assets = job.model.hf_assets_path
    if assets and assets != "./tests/assets/tokenizer" and not (Path(assets) / "tokenizer.json").is_file():
        _fail("model.hf_assets_path", assets, "holds no tokenizer.json; point it at a tokenizer folder or set it to \"\" "
              "to train the offline BPE")
    if job.checkpoint.initial_load_path and not Path(job.checkpoint.initial_load_path).exists():
        _fail("checkpoint.initial_load_path", job.checkpoint.initial_load_path, "does not exist")
    if b.norm == "local" and t > 1:
        warnings.warn('boost.norm = "local": each rank normalises its shard alone; the model is NOT the dense '
                      "model and changes with the TP degree", stacklevel=2)


def main(argv: list[str] | None = None) -> None:
    try:
        check_job(sys.argv[1:] if argv is None else argv)
    except ConfigError as e:
        print(f"BOOST config error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
