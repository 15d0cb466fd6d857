"""Rank 0 of a run with each step's collectives counted whole (``tests/rank_server.py``'s probe): a second
``CommCounter`` around ``BoostTrainer._train_step``, from its data to its lr step, one ``PROBE step N:``
line a step, against which the trainer's ``comm/step`` line is read."""

from __future__ import annotations

from collections.abc import Callable

PROBE = "tests.end_to_end.whole_step_probe:probe"


def probe(main: Callable[[type], None]) -> None:
    """Train through ``main`` (``torchtitan_ext.train.main``) with every step under a ``CommCounter``."""
    from boost.runtime.comm_counter import CommCounter
    from torchtitan_ext.train import BoostTrainer

    class WholeStepTrainer(BoostTrainer):
        def _train_step(self, data_iterator) -> None:
            with CommCounter() as counter:
                super()._train_step(data_iterator)
            print(f"PROBE step {self.step}: {counter.summary()}", flush=True)

    main(WholeStepTrainer)
