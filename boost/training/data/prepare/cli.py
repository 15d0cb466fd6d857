"""``python -m boost.training.data.prepare``: the command line of a prepare, its one-line errors and exit codes.

Exit 0 when the folder is a dataset, 2 on input a user must change (one ``error:`` line naming the
file and line, or the option, and the fix), 130 on Ctrl-C (one line; a re-run continues).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

USAGE_EXAMPLE = (
    "python -m boost.training.data.prepare --config train_configs/1B.toml --input c4/en --output data/c4-1B"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m boost.training.data.prepare",
        description="Tokenize a corpus once into a folder of token shards that training reads by memory map "
        '(training.dataset = "tokens", training.dataset_path = DIR).',
        epilog=f"example: {USAGE_EXAMPLE}",
    )
    tokenizer = parser.add_mutually_exclusive_group(required=True)
    tokenizer.add_argument("--config", help="the run's TOML: prepare with the tokenizer that run trains with")
    tokenizer.add_argument("--tokenizer", help="a tokenizer folder (tokenizer.json, tokenizer_config.json)")
    parser.add_argument(
        "--input", nargs="+", required=True, metavar="PATH",
        help=".txt, .jsonl, .json.gz, .jsonl.gz or .parquet files, folders of them (recursive) or globs",
    )  # fmt: skip
    parser.add_argument(
        "--output", required=True, metavar="DIR", help="the token folder (new, or one to continue)"
    )
    parser.add_argument("--text-field", default="text", help="the document's field or column (default: text)")
    parser.add_argument(
        "--validation-fraction", type=float, default=0.0, metavar="F",
        help="hold this fraction of documents out into the validation split (by a hash of the text)",
    )  # fmt: skip
    parser.add_argument("--workers", type=int, default=None, help="cores to use (default: all)")
    parser.add_argument(
        "--skip-bad", action="store_true",
        help="skip bad records (not JSON, no text field, not UTF-8, truncated .gz, empty file) and count them",
    )  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        from boost.training.config_error import ConfigError
        from boost.training.data.prepare.preparer import PrepareInterrupted, prepare_corpus
        from boost.training.data.prepare.worker_pool import WorkerDied
        from boost.training.data.run_tokenizer import RunError, read_toml, run_tokenizer_dir

        try:
            folder = Path(args.tokenizer) if args.tokenizer else run_tokenizer_dir(read_toml(args.config))
            result = prepare_corpus(
                args.input,
                args.output,
                folder,
                text_field=args.text_field,
                validation_fraction=args.validation_fraction,
                workers=args.workers,
                skip_bad=args.skip_bad,
            )
        except (ConfigError, RunError, WorkerDied) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except PrepareInterrupted as e:
            print(e, file=sys.stderr)
            return 130
    except KeyboardInterrupt:
        print("interrupted; re-run the same command to continue", file=sys.stderr)
        return 130
    print(result.summary)
    return 0
