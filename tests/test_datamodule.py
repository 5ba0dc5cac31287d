from collections import Counter

import numpy as np
import pytest
import torch

from retrieval_zoo.data.doc_rows import DocRows, RankedRows
from retrieval_zoo.id_index import IdIndex
from retrieval_zoo.training.datamodule import TriplesDataModule
from retrieval_zoo.training.negatives import GroupSampling, ShardedEpochSampler, negative_pool

CORPUS = IdIndex(["p1", "p2", "p3", "n1", "n2", "n3", "r1", "r2"])


def sampling(random_negatives: bool = False) -> GroupSampling:
    return GroupSampling(
        row_of={"q1": 0, "q2": 1},
        positives=DocRows.from_lists([CORPUS.rows(["p1", "p2"]), CORPUS.rows(["p3"])]),
        pool=DocRows.from_lists([CORPUS.rows(["n1", "n2", "n3"]), []]),
        docs=CORPUS,
        n_negatives=2,
        seed=7,
        random_negatives=random_negatives,
    )


def test_groups_are_deterministic_per_qid_seed_epoch() -> None:
    s = sampling()
    assert s.group("q1", 0) == sampling().group("q1", 0)
    assert len({tuple(s.group("q1", e)) for e in range(10)}) > 1
    group = s.group("q1", 3)
    assert group[0] in {"p1", "p2"} and set(group[1:]) <= {"n1", "n2", "n3"}


def test_positives_are_never_negatives() -> None:
    docs = IdIndex(["p", "a", "b", "c"])
    run = RankedRows(np.array([0, 3]), docs.rows(["a", "p", "b"]).astype(np.int32), np.array([3.0, 2.0, 1.0]))
    pool = negative_pool(run, DocRows.from_lists([docs.rows(["p"])]), len(docs))  # "b" is judged, but not relevant
    assert docs.names(pool.row(0)) == ["a", "b"]
    random_mode = sampling(random_negatives=True)
    for epoch in range(30):
        negatives = random_mode.group("q1", epoch)[1:]
        assert not {"p1", "p2"} & set(negatives)
    # An empty pool falls back to random corpus documents, never the positive.
    assert "p3" not in sampling().group("q2", 0)[1:]


def test_sharded_sampler_world_size_two() -> None:
    ranks = [ShardedEpochSampler(11, seed=1, rank=r, world_size=2) for r in range(2)]
    for sampler in ranks:
        sampler.set_epoch(2)
    shards = [[i for i, _ in sampler] for sampler in ranks]
    assert len(shards[0]) == len(shards[1]) == 5
    assert not set(shards[0]) & set(shards[1])
    single = ShardedEpochSampler(11, seed=1)
    single.set_epoch(2)
    order = [i for i, _ in single]
    # Rank r takes every other index of the same global order: global batch i is the union of local batches i.
    assert shards[0] == order[0:10:2] and shards[1] == order[1:10:2]
    assert all(epoch == 2 for _, epoch in ranks[0])


def test_datamodule_batches_with_bm25_scores(tiny, tiny_bm25) -> None:
    dm = TriplesDataModule(tiny, tiny_bm25, batch_size=8, n_negatives=2, needs={"bm25_scores"}, epochs=1, seed=3)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert len(batch.queries) == 8 and len(batch.docs) == 24 and batch.bm25_scores.shape == (8, 3)
    qrels = tiny.qrels["train"]
    for qid, group in zip(batch.qids, batch.docids, strict=True):
        assert qrels[qid].get(group[0], 0) > 0 and all(qrels[qid].get(d, 0) == 0 for d in group[1:])
    # The positive's score is BM25's own, even for a positive outside the run.
    qid, positive = batch.qids[0], batch.docids[0][0]
    exact = tiny_bm25.pair_scores(tiny.queries["train"], [(qid, positive)])[0]
    assert batch.bm25_scores[0, 0].item() == pytest.approx(float(exact), abs=1e-3)
    # Same seed → same batches; the teacher field stays empty when not needed.
    again = TriplesDataModule(tiny, tiny_bm25, batch_size=8, n_negatives=2, needs={"bm25_scores"}, epochs=1, seed=3)
    again.setup("fit")
    assert next(iter(again.train_dataloader())).docids == batch.docids
    assert batch.teacher_scores is None


def test_each_epoch_draws_one_value_from_the_global_torch_rng(tiny, tiny_bm25) -> None:
    # The README's tables were trained with this stream: starting an epoch takes the workers' base seed from the
    # global RNG, which moves every dropout mask after it. A loader generator of its own (19aaea9) moved the tables.
    dm = TriplesDataModule(tiny, tiny_bm25, batch_size=8, epochs=1, seed=3)
    dm.setup("fit")
    torch.manual_seed(0)
    next(iter(dm.train_dataloader()))
    after_loader = torch.rand(3)
    torch.manual_seed(0)
    torch.empty((), dtype=torch.int64).random_()  # the one draw DataLoader makes for its base seed
    assert torch.equal(after_loader, torch.rand(3))
    torch.manual_seed(0)
    assert not torch.equal(after_loader, torch.rand(3))  # the draw is there


def test_datamodule_rejects_bad_settings(tiny, tiny_bm25) -> None:
    with pytest.raises(ValueError, match="unknown batch fields"):
        TriplesDataModule(tiny, tiny_bm25, needs={"colbert"})
    with pytest.raises(ValueError, match="teacher_run is not set"):
        TriplesDataModule(tiny, tiny_bm25, needs={"teacher_scores"})


def test_teacher_scores_and_bm25_vectors(tiny, tiny_bm25, tmp_path) -> None:
    from retrieval_zoo.data.formats import write_run

    qids = sorted(tiny.judged_queries("train"))
    teacher = {q: {d: float(i) for i, d in enumerate(tiny.corpus)} for q in qids}
    write_run(tmp_path / "teacher.trec", teacher)
    dm = TriplesDataModule(
        tiny, tiny_bm25, batch_size=4, teacher_run=str(tmp_path / "teacher.trec"),
        needs={"teacher_scores", "bm25_vectors"}, epochs=1,
    )  # fmt: skip
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    expected = [[teacher[q][d] for d in g] for q, g in zip(batch.qids, batch.docids, strict=True)]
    assert torch.allclose(batch.teacher_scores, torch.tensor(expected))
    assert len(batch.bm25_doc_vectors) == 8 and all(v for v in batch.bm25_doc_vectors)
    assert Counter(type(v) for v in batch.bm25_query_vectors) == Counter({dict: 4})


def test_teacher_run_restricts_sampling_to_its_pairs(tiny, tiny_bm25, tmp_path, capsys) -> None:
    """A teacher run that misses a query's positive, or all of its negatives, keeps that query out of training."""
    from retrieval_zoo.data.formats import write_run

    qids = sorted(tiny.judged_queries("train"))
    qrels = tiny.qrels["train"]
    bm25_run = tiny_bm25.search({q: tiny.queries["train"][q] for q in qids}, 100)
    teacher = {q: {d: float(i) for i, d in enumerate(bm25_run[q])} for q in qids}
    for qid in qids:  # every judged positive scored, then two queries lose coverage
        teacher[qid].update({d: 99.0 for d, g in qrels[qid].items() if g > 0})
    no_pool = {q for q in qids if not set(bm25_run[q]) - {d for d, g in qrels[q].items() if g > 0}}
    no_positive, no_negative = sorted(set(qids) - no_pool)[:2]
    teacher[no_positive] = {d: s for d, s in teacher[no_positive].items() if qrels[no_positive].get(d, 0) <= 0}
    teacher[no_negative] = {d: 99.0 for d, g in qrels[no_negative].items() if g > 0}
    write_run(tmp_path / "teacher.trec", teacher)
    dm = TriplesDataModule(
        tiny, tiny_bm25, batch_size=4, teacher_run=str(tmp_path / "teacher.trec"), needs={"teacher_scores"}, epochs=2
    )
    dm.setup("fit")
    assert no_positive not in dm.train_qids and no_negative not in dm.train_qids
    assert len(dm.train_qids) == len(qids) - 2 - len(no_pool)
    expected = f"scores no positive of 1 and no negative of {1 + len(no_pool)} training queries (of {len(qids)})"
    assert expected in capsys.readouterr().out
    for batch in dm.train_dataloader():  # every sampled pair has its teacher score
        expected = [[teacher[q][d] for d in g] for q, g in zip(batch.qids, batch.docids, strict=True)]
        assert torch.equal(batch.teacher_scores, torch.tensor(expected))


def test_global_batch_must_divide_by_world_size(tiny, tiny_bm25, monkeypatch) -> None:
    dm = TriplesDataModule(tiny, tiny_bm25, batch_size=5)
    dm.setup("fit")
    monkeypatch.setattr(dm, "_world", lambda: (0, 2))
    with pytest.raises(ValueError, match="does not divide by the world size 2"):
        dm.train_dataloader()


def test_validation_queries_are_dealt_to_ranks_once_each(tiny, tiny_bm25, monkeypatch) -> None:
    dm = TriplesDataModule(tiny, tiny_bm25, val_queries=7)
    dm.setup("fit")
    shares = []
    for rank in range(3):
        monkeypatch.setattr(dm, "_world", lambda rank=rank: (rank, 3))
        shares.append([qid for batch in dm.val_dataloader() for qid in batch])
    assert [len(share) for share in shares] == [3, 2, 2]  # no padding: no query counted twice
    assert sorted(q for share in shares for q in share) == dm.val_qids and len(set(dm.val_qids)) == 7
    assert dm.val_numbers == {qid: i for i, qid in enumerate(dm.val_qids)}
    monkeypatch.setattr(dm, "_world", lambda: (0, 8))
    with pytest.raises(ValueError, match="7 validation queries cannot be dealt to 8 ranks"):
        dm.val_dataloader()


def test_lightning_advances_the_sampler_epoch(tiny, tiny_bm25, tmp_path) -> None:
    import lightning as L

    seen: dict[int, list] = {}

    class Recorder(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))

        def training_step(self, batch, batch_idx):
            seen.setdefault(self.current_epoch, []).append((batch.qids, batch.docids))
            return (self.weight * 0).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    dm = TriplesDataModule(tiny, tiny_bm25, batch_size=8, n_negatives=2, val_queries=None)
    trainer = L.Trainer(
        max_epochs=2, limit_val_batches=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        use_distributed_sampler=False, default_root_dir=str(tmp_path), enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(Recorder(), datamodule=dm)
    assert len(seen[0]) == len(seen[1]) == 120 // 8
    assert seen[0] != seen[1]  # a new shuffle and new negatives each epoch
    first_epoch_qids = sorted(q for qids, _ in seen[0] for q in qids)
    assert first_epoch_qids == sorted(tiny.judged_queries("train"))


def test_a_negatives_run_with_unknown_ids_names_file_and_line(tiny, tiny_bm25, tmp_path) -> None:
    from retrieval_zoo.data.formats import FormatError

    qid = sorted(tiny.judged_queries("train"))[0]
    doc = next(iter(tiny.corpus))
    (tmp_path / "negatives.trec").write_text(f"{qid} Q0 {doc} 1 2.0 t\n{qid} Q0 no-such-doc 2 1.0 t\n")
    dm = TriplesDataModule(tiny, tiny_bm25, negatives_run=str(tmp_path / "negatives.trec"))
    with pytest.raises(FormatError, match=r"negatives.trec:2: unknown document id 'no-such-doc'"):
        dm.setup("fit")


def test_training_steps_receive_tokens_made_in_the_dataloader_and_lose_nothing(tiny, tiny_bm25, tmp_path) -> None:
    import dataclasses

    import lightning as L

    from retrieval_zoo.encoding.tokens import Tokens
    from retrieval_zoo.methods.dense import DenseBiEncoder
    from tests.conftest import clear_encoder

    model = DenseBiEncoder(clear_encoder()).eval()  # markers: the workers' tokenizer must prefix them too
    dm = TriplesDataModule(tiny, tiny_bm25, batch_size=8, n_negatives=1, tokenizer=model.text_tokenizer())
    plain = TriplesDataModule(tiny, tiny_bm25, batch_size=8, n_negatives=1)
    dm.setup(), plain.setup()
    items = [(q, dm.sampling.group(q, 0)) for q in dm.train_qids[:4]]
    tokenized, texts = dm.collate(items), plain.collate(items)
    assert tokenized.queries is None and tokenized.docs is None  # no strings reach the step, but ids
    wants_texts = TriplesDataModule(tiny, tiny_bm25, batch_size=8, needs={"texts"}, tokenizer=model.text_tokenizer())
    wants_texts.setup()
    kept = wants_texts.collate(items)  # an online teacher reads the texts with its own tokenizer
    assert kept.queries == texts.queries and kept.docs == texts.docs and kept.query_tokens is not None
    assert torch.equal(tokenized.query_tokens.ids, model.encoder.tokenize(texts.queries, "query")[0])
    assert torch.equal(tokenized.doc_tokens.mask, model.encoder.tokenize(texts.docs, "doc")[1])
    torch.manual_seed(0)
    with torch.no_grad():
        from_tokens = model.losses(tokenized)[0]["nll"]
        from_texts = model.losses(texts)[0]["nll"]
    assert torch.equal(from_tokens, from_texts)  # the very same loss

    seen: list[dict[str, type]] = []

    class Recorder(DenseBiEncoder):
        def training_step(self, batch, batch_idx):
            seen.append({f.name: type(getattr(batch, f.name)) for f in dataclasses.fields(batch)})
            return super().training_step(batch, batch_idx)

    dm = TriplesDataModule(
        tiny, tiny_bm25, batch_size=8, n_negatives=1, num_workers=1, tokenizer=model.text_tokenizer()
    )
    trainer = L.Trainer(
        max_steps=2, limit_val_batches=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        use_distributed_sampler=False, default_root_dir=str(tmp_path), enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(Recorder(clear_encoder()), datamodule=dm)
    assert len(seen) == 2
    for fields in seen:  # tokenized in the worker; the texts never reach the step
        assert fields["query_tokens"] is Tokens and fields["doc_tokens"] is Tokens
        assert fields["queries"] is type(None) and fields["docs"] is type(None)


def test_workers_auto_is_none_on_cpus_and_bad_values_fail_at_construction(tiny, tiny_bm25) -> None:
    dm = TriplesDataModule(tiny, tiny_bm25, batch_size=8)
    assert dm.num_workers == "auto"
    dm.setup()
    loader = dm.train_dataloader()  # no trainer: a CPU process
    assert loader.num_workers == 0 and not loader.pin_memory
    for bad in ("many", -1, 1.5):
        with pytest.raises(ValueError, match="data.num_workers must be 'auto' or a number"):
            TriplesDataModule(tiny, tiny_bm25, num_workers=bad)


def test_without_a_validation_split_validation_holds_out_training_queries(tiny, tiny_bm25, capsys) -> None:
    from dataclasses import replace

    no_dev = replace(tiny, qrels={"train": tiny.qrels["train"]})  # a BEIR-like collection: train and test only
    dm = TriplesDataModule(no_dev, tiny_bm25, batch_size=8, epochs=1, seed=3, val_queries=20, holdout_queries=10)
    assert "has no 'dev' judgements: validating on 20 judged 'train' queries" in capsys.readouterr().out
    dm.setup("fit")
    judged = sorted(tiny.judged_queries("train"))  # 120: the last 10 tuned on (at most 10), the 20 before validated
    assert dm.val_split == "train" and dm.val_qids == judged[-30:-10]
    assert not set(dm.train_qids) & set(judged[-30:]) and len(dm.train_qids) == 90


def test_a_step_budget_the_epochs_cannot_reach_is_said_at_the_start(capsys) -> None:
    from types import SimpleNamespace

    from retrieval_zoo.training.progress import StepBudget, shortfall

    assert shortfall(120, 1, 23) and not shortfall(120, 1, 120) and not shortfall(-1, 1, 23)
    assert not shortfall(120, -1, 120)  # epochs unbounded: the steps decide
    trainer = SimpleNamespace(max_steps=120, max_epochs=1, estimated_stepping_batches=23)
    StepBudget().on_train_start(trainer, None)
    assert "trainer.max_steps=120 will not be reached: trainer.max_epochs=1 give 23 steps" in capsys.readouterr().out


def test_progress_lines_keep_the_epoch_length_read_at_its_start_when_counting_in_steps(capsys) -> None:
    from types import SimpleNamespace

    from retrieval_zoo.training.progress import LineProgress

    # the third epoch of a 120-step recipe on 53 batches an epoch: 14 steps left when it starts
    trainer = SimpleNamespace(max_steps=120, max_epochs=-1, num_training_batches=53, global_step=106, current_epoch=2)
    progress = LineProgress(every_percent=50.0)
    progress._trainer = trainer  # what Lightning sets when it attaches the callback
    progress.get_metrics = lambda trainer, module: {}
    progress.on_train_epoch_start(trainer, None)
    trainer.global_step = 113  # Lightning's own count of the epoch's batches has shrunk to 7 by now
    progress.on_train_batch_end(trainer, None, None, None, batch_idx=6)
    assert "[train] epoch 3: batch 7/14 (50%), step 113" in capsys.readouterr().out


def test_a_recipe_counting_in_steps_prepares_the_epochs_its_steps_reach() -> None:
    from types import SimpleNamespace

    from retrieval_zoo.training.datamodule import epochs_to_prepare

    def trainer(max_epochs, max_steps, accumulate=1):
        return SimpleNamespace(max_epochs=max_epochs, max_steps=max_steps, accumulate_grad_batches=accumulate)

    assert epochs_to_prepare(trainer(3, 120), 1707, 32) == 3
    assert epochs_to_prepare(trainer(-1, 120), 1707, 32) == 3  # 53 steps an epoch: 120 steps reach the third
    assert epochs_to_prepare(trainer(-1, 266), 8530, 32) == 1  # exactly one epoch of 266 batches
    assert epochs_to_prepare(
        trainer(-1, 120),
        1707,
        32,
    ) == epochs_to_prepare(trainer(None, 120), 1707, 32)
    assert epochs_to_prepare(trainer(-1, 120, accumulate=2), 1707, 32) == 5  # 26 steps an epoch
    assert epochs_to_prepare(None, 1707, 32) == 1
    with pytest.raises(ValueError, match="max_steps > 0"):
        epochs_to_prepare(trainer(-1, -1), 1707, 32)
