"""``python -m boost.after_training.interop``: ``import`` a Hugging Face LLaMA folder, ``export`` a run or a folder.

Every refusal prints one line, ``error: <message>``, and exits 2; the ``--out`` path is checked
before any work.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from boost.after_training.interop.factorize import format_report
from boost.after_training.interop.read import load_hf, load_hf_with_report
from boost.after_training.interop.write import densify, save_hf
from boost.training.model.model import Transformer
from boost.training.rules import LINEAR_KINDS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m boost.after_training.interop",
        description="Hugging Face LLaMA checkpoints in and out of BOOST.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    imp = sub.add_parser(
        "import", help="Hugging Face LLaMA folder -> BOOST folder (prints the factorisation errors)"
    )
    imp.add_argument("hf_dir")
    imp.add_argument(
        "--linear", choices=LINEAR_KINDS, default=None, help="default: full, or a BOOST folder's own kind"
    )
    imp.add_argument("--rank", type=int, default=None, help="bottleneck rank (default hidden_size // 4)")
    imp.add_argument("--out", required=True)
    exp = sub.add_parser(
        "export",
        help="a run's DCP checkpoint or a BOOST folder -> transformers folder (any kind, with tokenizer)",
    )
    exp.add_argument(
        "source",
        nargs="?",
        metavar="SOURCE",
        help="folder (BOOST/transformers), or with --config a step-N folder or step",
    )
    exp.add_argument(
        "--config", default=None, help="the run's TOML: export its newest (or the given) checkpoint"
    )
    exp.add_argument(
        "--tokenizer", default=None, help="tokenizer folder (default: the run's / the source folder's)"
    )
    exp.add_argument(
        "--densify", action="store_true", help="svd only: write plain LlamaForCausalLM (W = B·A)"
    )
    exp.add_argument("--out", required=True)
    from boost.training.data.run_tokenizer import RunError, split_overrides

    # --section.field value: the overrides the run was started with (--boost.linear svd), for export --config
    own, overrides = split_overrides(sys.argv[1:] if argv is None else argv)
    ns = parser.parse_args(own)
    ns.overrides = overrides
    if overrides and (ns.command != "export" or ns.config is None):
        parser.error(
            f"unrecognized arguments: {' '.join(overrides)} (a run's overrides go with export --config)"
        )

    try:
        if not ns.out.strip():
            raise ValueError(
                "--out is empty; give the folder to write (it would write into the working folder)"
            )
        if Path(ns.out).exists() and not Path(ns.out).is_dir():
            raise FileExistsError(f"--out {ns.out} is an existing file; give a folder path")
        held = sorted(p.name for p in Path(ns.out).iterdir()) if Path(ns.out).is_dir() else []
        if held:
            # written over, the folder would keep what this export does not write (another model's tokenizer,
            # an older shard), which transformers then loads beside it
            raise FileExistsError(
                f"--out {ns.out} already holds files ({', '.join(held[:4])}{', ...' if len(held) > 4 else ''}); "
                "give a new folder, or remove that one first"
            )
        if ns.command == "import":
            model, report = load_hf_with_report(ns.hf_dir, ns.linear, ns.rank)
            if model.model_args.low_rank:
                print(
                    f"rank-{model.model_args.rank} {model.model_args.linear} import, "
                    "relative Frobenius error ‖W − BA‖/‖W‖:"
                )
                print(format_report(report))
            save_hf(model, ns.out)
        else:
            model, tokenizer = _export_source(ns)
            save_hf(densify(model) if ns.densify else model, ns.out, tokenizer)
    except (FileNotFoundError, FileExistsError, KeyError, ValueError, RunError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {ns.out}")
    return 0


def _export_source(ns: argparse.Namespace) -> tuple[Transformer, Path | None]:
    """The model to export and its tokenizer folder: a run's DCP checkpoint (``--config``) or a folder."""
    if ns.config is not None:
        from boost.after_training.trained_run import load_run

        # the run's step is this CLI's positional SOURCE: the refusals name it, not evaluate's --checkpoint
        run = load_run(ns.config, ns.source, ns.tokenizer, overrides=ns.overrides, checkpoint_arg="SOURCE")
        if run.config["boost"]["norm"] == "local":
            # transformers' RMSNorm is the exact one: a shard-local norm's model has no such folder
            raise ValueError(
                f"{run.checkpoint}: trained with boost.norm = 'local' (each pre-norm over a rank's shard), "
                "which no Hugging Face folder computes; train with boost.norm = 'online' to export"
            )
        return run.model, run.tokenizer.folder
    if ns.source is None:
        raise ValueError("export needs a source folder, or --config TOML for a run's newest checkpoint")
    source = Path(ns.source)
    if (source / ".metadata").is_file():
        raise ValueError(f"{source} is a DCP checkpoint: add --config with the TOML of the run that wrote it")
    tokenizer = ns.tokenizer or (source if (source / "tokenizer.json").is_file() else None)
    return load_hf(source), tokenizer
