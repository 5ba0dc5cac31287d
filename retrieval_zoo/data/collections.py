"""Collections: a corpus, queries and qrels per split, loaded from MS MARCO TSV or BEIR JSONL and validated.

Dataset configs (``conf/dataset/*.yaml``) instantiate one of the loaders below. Each collection carries a content
fingerprint, so every artifact derived from it (BM25 index, runs, encodings) is cached under its content.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Literal

from retrieval_zoo.cache import file_digest, fingerprint
from retrieval_zoo.data.corpus_store import corpus_store
from retrieval_zoo.data.formats import (
    FormatError,
    Qrels,
    Run,
    numbered_lines,
    read_beir_jsonl,
    read_id_text_tsv,
    read_qrels,
)

EMBEDDED_ROOT = Path(str(resources.files("retrieval_zoo") / "embedded"))


TUNING_SHARE = 0.1  # of the judged training queries, held out to tune fusion weights on (at most eval.tune_queries)
MIN_TRAINING_QUERIES = 50  # tuning never leaves fewer judged training queries than this to train on


@dataclass
class Collection:
    """A validated retrieval collection.

    Attributes:
        name: Short name used in run tags and logs.
        corpus: docid → text: a :class:`~retrieval_zoo.data.corpus_store.CorpusStore` on disk when read from a file,
            any mapping when built in memory.
        queries: split → (qid → text).
        qrels: split → qrels; only judged queries of a split are evaluated or trained on.
        files: The files it was read from, whose content defines :attr:`fingerprint`.
        corpus_files: Those of ``files`` that hold the documents, whose content defines :attr:`corpus_fingerprint`.
        train_split: The split training queries come from.
        eval_split: The split evaluation reports by default (MS MARCO: dev-small).
        digests: SHA-256 of content read from elsewhere than ``files`` (ir_datasets), by part (``corpus``,
            ``queries``, ``qrels``): part of :attr:`fingerprint`, and the corpus's of :attr:`corpus_fingerprint`.
    """

    name: str
    corpus: Mapping[str, str]
    queries: dict[str, dict[str, str]]
    qrels: dict[str, Qrels]
    files: list[Path] = field(default_factory=list)
    train_split: str = "train"
    eval_split: str = "dev"
    corpus_files: list[Path] = field(default_factory=list)
    digests: dict[str, str] = field(default_factory=dict)

    @cached_property
    def corpus_fingerprint(self) -> str:
        """Hash of the corpus: keys artifacts that depend on documents only, such as the BM25 index.

        The content of :attr:`corpus_files`, whatever they are named; a collection built in memory, without files,
        is hashed from its documents.
        """
        if self.corpus_files:
            return fingerprint([file_digest(p) for p in self.corpus_files])
        if "corpus" in self.digests:
            return fingerprint("corpus content", self.digests["corpus"])
        return fingerprint("in-memory corpus", sorted(self.corpus.items()))

    @cached_property
    def fingerprint(self) -> str:
        """Hash of every file's content (and of :attr:`digests`)."""
        files = [file_digest(p) for p in self.files]
        return fingerprint(files, sorted(self.digests.items())) if self.digests else fingerprint(files)

    def judged_queries(self, split: str) -> dict[str, str]:
        """Queries of ``split`` that have at least one relevant document, in qid order of the qrels."""
        if split not in self.qrels:
            raise KeyError(f"collection {self.name!r} has no qrels for split {split!r}; has {sorted(self.qrels)}")
        queries = self.queries[split]
        return {qid: queries[qid] for qid, judged in self.qrels[split].items() if any(r > 0 for r in judged.values())}

    def tuning_count(self, cap: int) -> int:
        """How many judged training queries are held out to tune fusion weights on: a share of them, at most ``cap``.

        :data:`TUNING_SHARE` of the judged training queries, at most ``cap`` (``eval.tune_queries``; 0: none), so a
        small collection is not emptied for tuning; never leaving fewer than :data:`MIN_TRAINING_QUERIES` to train on.
        """
        if cap <= 0:
            return 0
        judged = len(self.judged_queries(self.train_split))
        count = min(cap, int(TUNING_SHARE * judged))
        if judged - count < MIN_TRAINING_QUERIES or count == 0:
            raise ValueError(
                f"eval.tune_queries={cap}: {self.name!r} has {judged:,} judged {self.train_split!r} queries; holding "
                f"out {count:,} ({TUNING_SHARE:.0%}) to tune on would leave {judged - count:,}, and training needs "
                f"{MIN_TRAINING_QUERIES}: set eval.tune_queries=0 and the fusion weight with index.weight=W"
            )
        return count

    def validation_qids(self, count: int, tuning_cap: int) -> list[str]:
        """``count`` judged training queries held out from training to validate on (no validation split).

        The slice just before the tuning one (:meth:`tuning_qids`), never leaving fewer than
        :data:`MIN_TRAINING_QUERIES` to train on.
        """
        judged = sorted(self.judged_queries(self.train_split))
        tuning = self.tuning_count(tuning_cap)
        if len(judged) - tuning - count < MIN_TRAINING_QUERIES:
            raise ValueError(
                f"data.val_queries={count}: {self.name!r} has no validation split and {len(judged):,} judged "
                f"{self.train_split!r} queries; holding out {count:,} to validate on (and {tuning:,} to tune on) would "
                f"leave {len(judged) - tuning - count:,} to train on, fewer than {MIN_TRAINING_QUERIES}: lower "
                "data.val_queries or name a split with data.val_split"
            )
        return judged[len(judged) - tuning - count : len(judged) - tuning]

    def tuning_qids(self, cap: int) -> list[str]:
        """A fixed slice of judged training queries held out from training, to tune fusion weights on."""
        count = self.tuning_count(cap)
        return sorted(self.judged_queries(self.train_split))[-count:] if count > 0 else []


def check_ids(path: str | Path, table: Qrels | Run, queries: Mapping[str, str], corpus: Mapping[str, str]) -> None:
    """Fail on the first line of a qrels or run file whose query or document id is unknown, naming the line."""
    for qid, docs in table.items():
        unknown_doc = next((d for d in docs if d not in corpus), None)
        if qid in queries and unknown_doc is None:
            continue
        bad, what = (qid, "query") if qid not in queries else (unknown_doc, "document")
        raise FormatError(path, _find_line(Path(path), qid, bad), f"unknown {what} id {bad!r}")


def _find_line(path: Path, qid: str, token: str | None) -> int | None:
    for lineno, line in numbered_lines(path):
        fields = line.split()
        if fields and fields[0] == qid and token in fields:
            return lineno
    return None


def msmarco_tsv(
    name: str,
    root: str,
    collection: str,
    queries: dict[str, str],
    qrels: dict[str, str],
    train_split: str = "train",
    eval_split: str = "dev",
) -> Collection:
    """Load a collection in MS MARCO's TSV layout.

    Args:
        name: Collection name.
        root: Directory holding the files.
        collection: ``pid<TAB>text`` file name, relative to ``root``.
        queries: split → ``qid<TAB>text`` file name.
        qrels: split → TREC qrels file name (``qid 0 pid rel``).
        train_split: Split of the training queries.
        eval_split: Split evaluated by default.
    """
    base = Path(root).expanduser()
    if not base.is_dir():
        raise FileNotFoundError(f"dataset {name!r}: directory {base} does not exist (set dataset.root=...)")
    corpus = corpus_store(base / collection, "tsv")
    split_queries = {split: read_id_text_tsv(base / f, "query") for split, f in queries.items()}
    split_qrels = {}
    for split, f in qrels.items():
        split_qrels[split] = read_qrels(base / f)
        check_ids(base / f, split_qrels[split], split_queries.get(split, {}), corpus)
    files = [base / collection, *(base / f for f in queries.values()), *(base / f for f in qrels.values())]
    return Collection(name, corpus, split_queries, split_qrels, files, train_split, eval_split, [base / collection])


EmbeddedName = Literal["debian_descriptions", "python_docstrings"]


def embedded(
    variant: str = "default", name: EmbeddedName = "debian_descriptions", eval_split: str = "dev"
) -> Collection:
    """A collection shipped in the package, with the splits its variant's files hold.

    Args:
        variant: ``debian_descriptions``: ``default`` (≈ 10k documents) or ``full`` (≈ 59k); ``python_docstrings``:
            ``default`` (2.6k).
        name: The collection (``retrieval_zoo/embedded/<name>``, whose README says how it was built).
        eval_split: The split evaluated by default (``python_docstrings`` has ``test`` beside ``dev``).
    """
    root = EMBEDDED_ROOT / name / variant
    splits = sorted(p.name.split(".")[1] for p in root.glob("qrels.*.tsv.gz"))
    if not splits:
        raise FileNotFoundError(f"{root}: no embedded collection {name!r} variant {variant!r} (no qrels.*.tsv.gz)")
    files = {split: f"queries.{split}.tsv.gz" for split in splits}
    qrels = {split: f"qrels.{split}.tsv.gz" for split in splits}
    return msmarco_tsv(f"{name}-{variant}", str(root), "collection.tsv.gz", files, qrels, eval_split=eval_split)


def beir(name: str, root: str, splits: list[str], train_split: str = "train", eval_split: str = "test") -> Collection:
    """Load a BEIR dataset directory: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.

    Args:
        name: Collection name.
        root: The dataset directory.
        splits: Qrels files to load (``test``, ``dev``, ``train``).
        train_split: Split of the training queries (most BEIR sets have none: evaluate only).
        eval_split: Split evaluated by default.
    """
    base = Path(root).expanduser()
    if not base.is_dir():
        raise FileNotFoundError(f"dataset {name!r}: directory {base} does not exist (set dataset.root=...)")
    corpus = corpus_store(base / "corpus.jsonl", "beir")
    all_queries = read_beir_jsonl(base / "queries.jsonl", "query")
    split_qrels, split_queries = {}, {}
    for split in splits:
        path = base / "qrels" / f"{split}.tsv"
        split_qrels[split] = read_qrels(path)
        check_ids(path, split_qrels[split], all_queries, corpus)
        split_queries[split] = {q: all_queries[q] for q in split_qrels[split]}
    files = [base / "corpus.jsonl", base / "queries.jsonl", *(base / "qrels" / f"{s}.tsv" for s in splits)]
    return Collection(name, corpus, split_queries, split_qrels, files, train_split, eval_split, files[:1])
