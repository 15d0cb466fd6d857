"""The ``tokens`` dataset's global order, in the library alone: the keyed shuffle, the blend, the
data-parallel arithmetic, epochs, validation passes and the checkpointed position.

Every folder here is written with ``boost.training.data.token_folder.write_shard`` from made-up ids (the
order does not read them as text), small enough that whole epochs are enumerated.
"""

from __future__ import annotations

import logging
import re
from fractions import Fraction
from pathlib import Path

import pytest
import torch

from boost.training.config_error import ConfigError
from boost.training.data.keyed_permutation import KeyedPermutation
from boost.training.data.token_batches import TokenBatches
from boost.training.data.token_blend import BlendSchedule, parse_blend
from boost.training.data.token_folder import TokenSplit, read_manifest
from boost.training.data.token_order import TokenOrder, micro_batch_start
from tests.token_folders import write_token_folder

SEQ_LEN = 7  # windows of 8 tokens


def folder_of_windows(path: Path, windows: int, first_id: int = 0, shard_docs: int = 3) -> TokenSplit:
    """A train split of exactly ``windows`` windows whose ids number the tokens, so a window names itself
    (its first id is ``first_id + window · 8``); documents of 5 tokens span window and shard boundaries."""
    ids = list(range(first_id, first_id + windows * (SEQ_LEN + 1)))
    documents = [ids[i : i + 5] for i in range(0, len(ids), 5)]
    write_token_folder(path, path, 2**20, documents, documents_per_shard=shard_docs)
    return TokenSplit(path, read_manifest(path, "training.dataset_path"), "train")


def window_of(sample: torch.Tensor) -> int:
    return int(sample[0]) // (SEQ_LEN + 1)


@pytest.fixture(scope="module")
def split60(tmp_path_factory) -> TokenSplit:
    return folder_of_windows(tmp_path_factory.mktemp("sixty"), 60)


def test_keyed_permutation_is_a_bijection_that_its_key_chooses():
    for n in (1, 2, 3, 5, 64, 1000, 4097):
        assert sorted(KeyedPermutation(n, key=11)(i) for i in range(n)) == list(range(n))
    p, same, other = (KeyedPermutation(1000, key=k) for k in (3, 3, 4))
    assert [p(i) for i in range(1000)] == [same(i) for i in range(1000)]
    assert [p(i) for i in range(1000)] != [other(i) for i in range(1000)]
    # a shuffle, not a shift: neighbours land far apart on average (uniform: n/3)
    assert sum(abs(p(i + 1) - p(i)) for i in range(999)) / 999 > 250


def test_windows_are_torchtitans_packing_cut_across_shards(split60):
    order = TokenOrder([split60], [Fraction(1)], SEQ_LEN, seed=0)
    assert order.windows == [60] and len(split60.manifest.splits["train"].shards) > 1
    source, window = order.sample(5)
    assert order.read(5).tolist() == list(range(window * 8, window * 8 + 8))  # int64, one window


def test_two_ranks_read_disjoint_samples_that_cover_an_epoch(split60):
    order = TokenOrder([split60], [Fraction(1)], SEQ_LEN, seed=0)
    dp, batch = 2, 3
    read = {rank: [] for rank in range(dp)}
    for index in range(60 // (dp * batch)):
        for rank in range(dp):
            first = micro_batch_start(0, index, rank, dp, batch)
            read[rank] += [order.sample(p)[1] for p in range(first, first + batch)]
    assert not set(read[0]) & set(read[1])
    assert sorted(read[0] + read[1]) == list(range(60))
    # the dataset's micro-batches are those windows' tokens, each rank its own
    for rank in range(dp):
        batches = TokenBatches(order, rank, dp, batch)
        got = [window_of(row) for (inputs, labels), _ in zip(batches, range(10)) for row in inputs["input"]]
        assert got == read[rank]


def test_each_epoch_is_a_new_shuffle_and_the_seed_fixes_them(split60):
    def epochs(seed: int) -> list[list[int]]:
        order = TokenOrder([split60], [Fraction(1)], SEQ_LEN, seed)
        return [[order.sample(p)[1] for p in range(e * 60, (e + 1) * 60)] for e in range(3)]

    first = epochs(seed=0)
    assert all(sorted(epoch) == list(range(60)) for epoch in first)
    assert first[0] != first[1] != first[2] and first[0] != list(range(60))
    assert epochs(seed=0) == first and epochs(seed=1) != first


def test_a_new_epoch_is_logged_by_every_rank(split60, caplog):
    order = TokenOrder([split60], [Fraction(1)], SEQ_LEN, seed=0)
    for rank in range(2):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="boost.training.data.token_batches"):
            batches = iter(
                TokenBatches(order, rank, 2, 4)
            )  # global micro-batches of 8: 60 falls inside the 8th
            for _ in range(9):
                next(batches)
        assert [r.getMessage() for r in caplog.records] == [
            "tokens: epoch 1 begins at sample 60 of the global order, reshuffled"
        ]


def test_resume_at_another_degree_and_batch_continues_the_global_order(split60):
    order = TokenOrder([split60], [Fraction(1)], SEQ_LEN, seed=5)
    uninterrupted = iter(TokenBatches(order, 0, 1, 4))
    steps = [
        [window_of(row) for row in next(uninterrupted)[0]["input"]] for _ in range(20)
    ]  # 80: into epoch 1

    one = TokenBatches(order, 0, 1, 4)
    first = iter(one)
    for _ in range(3):  # three steps at one rank, then a checkpoint
        next(first)
    state = one.state_dict()
    assert state["consumed_samples"] == 12
    # two ranks, two windows each, one micro-batch a step: the same global batch of 4
    ranks = []
    for rank in range(2):
        resumed = TokenBatches(order, rank, 2, 2)
        resumed.load_state_dict(state)
        ranks.append(iter(resumed))
    for step in range(3, 20):
        got = [window_of(row) for it in ranks for row in next(it)[0]["input"]]
        assert got == steps[step], step
    # three ranks of one window, four micro-batches accumulated a step (a batch of 12, from sample 12)
    three = [TokenBatches(order, rank, 3, 1) for rank in range(3)]
    for batches in three:
        batches.load_state_dict(state)
    its = [iter(b) for b in three]
    read = [window_of(next(it)[0]["input"][0]) for _ in range(4) for it in its]
    assert read == [w for step in steps[3:6] for w in step]
    assert three[0].state_dict()["consumed_samples"] == 12 + 12


def test_a_position_in_another_order_is_refused(split60):
    state = TokenBatches(TokenOrder([split60], [Fraction(1)], SEQ_LEN, seed=0), 0, 1, 4).state_dict()
    for other in (
        TokenOrder([split60], [Fraction(1)], SEQ_LEN + 1, 0),
        TokenOrder([split60], [Fraction(1)], SEQ_LEN, 1),
    ):
        with pytest.raises(ValueError, match="another order"):
            TokenBatches(other, 0, 1, 4).load_state_dict(state)


def test_validation_reads_the_same_windows_at_every_pass(split60):
    order = TokenOrder([split60], [Fraction(1)], SEQ_LEN, seed=0)
    ranks = [TokenBatches(order, rank, 2, 4, infinite=False) for rank in range(2)]
    passes = [[[window_of(r) for r in inputs["input"]] for inputs, _ in ranks[0]] for _ in range(2)]
    assert passes[0] == passes[1] and len(passes[0]) == 60 // 8 == ranks[1].micro_batches_per_pass()
    assert len(list(ranks[1])) == 7


def test_blend_holds_each_share_in_every_prefix_deterministically(tmp_path):
    parts = parse_blend("0.5:/a, 0.3:/b, 0.2:/c", "training.dataset_path")
    weights = [p.weight for p in parts]
    assert weights == [Fraction(1, 2), Fraction(3, 10), Fraction(1, 5)]
    schedule, again = BlendSchedule(weights), BlendSchedule(weights)
    counts = [0, 0, 0]
    for position in range(5000):
        source, index = schedule.source_of(position)
        assert index == counts[source] and again.source_of(position) == (source, index)
        counts[source] += 1
        assert max(abs(c - w * (position + 1)) for c, w in zip(counts, weights)) <= Fraction(3, 2)  # k/2
    # through an order of three folders of different sizes: each epoch of each folder is a shuffle of it
    splits = [
        folder_of_windows(tmp_path / name, n, first_id=1000 * i)
        for i, (name, n) in enumerate(zip("abc", (40, 30, 7)))
    ]
    order = TokenOrder(splits, weights, SEQ_LEN, seed=0)
    read = [order.read(p) for p in range(100)]
    by_source = [[int(w[0]) for w in read if int(w[0]) // 1000 == i] for i in range(3)]
    assert [len(s) for s in by_source] == [50, 30, 20]
    assert sorted(by_source[1]) == [1000 + 8 * w for w in range(30)]  # exactly one epoch of b
    assert len(set(by_source[2][:7])) == 7 and by_source[2][:7] != by_source[2][7:14]  # c: epochs reshuffled
    assert [order.read(p).tolist() for p in range(100)] == [w.tolist() for w in read]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("", "names no prepared folder"),
        ("0.7:/a,/b", "entry '/b' has no weight: every folder of a blend needs one"),
        ("0.7:/a,0:/b", "entry '0:/b' has weight 0: weights must be positive"),
        ("0.7:/a,-1:/b", "weights must be positive"),
        ("0.7:/a,", "has an empty entry (a stray comma)"),
        ("0.5:/a,0.5:/a", "names '/a' twice"),
        ("0.5:/a,0.5:/a/", "names '/a' twice"),  # one folder spelt two ways
        ("0.5:,0.5:/b", "entry '0.5:' names no folder after its weight"),
    ],
)
def test_a_malformed_blend_is_refused_naming_the_field(spec, message):
    with pytest.raises(ConfigError) as refused:
        parse_blend(spec, "training.dataset_path")
    assert str(refused.value).startswith(f"training.dataset_path = {spec!r}: ") and message in str(
        refused.value
    )


def test_an_order_refuses_weights_that_do_not_pair_with_its_splits(split60):
    # each weight is one split's share: unpaired, the blend is not the one the job asked for
    with pytest.raises(ValueError, match=re.escape("1 splits for 2 weights")):
        TokenOrder([split60], [Fraction(1, 2), Fraction(1, 2)], SEQ_LEN, seed=0)


def test_an_order_refuses_a_split_shorter_than_one_window(split60, tmp_path):
    # a split with no whole window has nothing for its share of the blend to draw
    write_token_folder(tmp_path, tmp_path, 2**20, [[0, 1, 2, 3, 4]])  # 5 tokens, a window is 8
    short = TokenSplit(tmp_path, read_manifest(tmp_path, "training.dataset_path"), "train")
    with pytest.raises(
        ValueError, match=re.escape("a split holds fewer than seq_len + 1 = 8 tokens: no window to read")
    ):
        TokenOrder([split60, short], [Fraction(1, 2), Fraction(1, 2)], SEQ_LEN, seed=0)


def test_order_differences_name_a_changed_weight():
    from boost.training.data.token_order import order_differences, order_identity

    saved = order_identity(SEQ_LEN, 0, [480, 480], [Fraction(1, 2), Fraction(1, 2)])
    current = order_identity(SEQ_LEN, 0, [480, 480], [Fraction(3, 4), Fraction(1, 4)])
    assert order_differences(saved, current) == [
        "folder 1 has weight 1/2 (checkpoint) against 3/4 (this job)",
        "folder 2 has weight 1/2 (checkpoint) against 1/4 (this job)",
    ]
    assert order_differences(saved, saved) == []


def test_a_shard_changed_after_prepare_is_named_not_fed_to_the_embedding(tmp_path):
    # its size unchanged (what the preflight checks), its ids past any the tokenizer has: an IndexError in the
    # embedding mid-training before, a device-side assert on a GPU
    split = folder_of_windows(tmp_path, 4)
    assert int(split.read(0, 32).max()) == 31
    shard = sorted(tmp_path.glob("train-*.bin"))[1]
    shard.write_bytes(b"\xff" * shard.stat().st_size)
    split = TokenSplit(tmp_path, read_manifest(tmp_path, "training.dataset_path"), "train")
    split.read(0, 5)  # the first shard is intact
    with pytest.raises(ValueError, match=re.escape(f"{shard} holds token id ")) as refused:
        split.read(0, 32)
    assert "above the largest id prepare wrote (31): the shard was changed after prepare" in str(
        refused.value
    )
