"""bmp 0.2.8 as :mod:`retrieval_zoo.index.terms.bmp` calls it.

The install check, the index files written through its CIFF reader (in a child process), and queries' impacts kept
within its 16-bit scores; that module's docstring says why each is needed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import torch

from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.index.terms.ciff_format import spill, term_lists, write_ciff
from retrieval_zoo.index.terms.forward_impacts import ForwardImpacts
from retrieval_zoo.index.terms.impact import ImpactCorpus, quantize

LEVELS = 255  # BMP stores 8-bit document impacts
QUERY_LEVELS = 32  # and rescales each query so that its largest weight is 32 (bmp 0.2.8's MAX_TERM_WEIGHT)
QUERY_MIN_LEVELS = 8  # a long query is searched at down to 8 levels before its lowest-weighted terms are cut
SCORE_LIMIT = 65_535  # bmp 0.2.8 adds scores in 16 bits
CIFF2BMP = "import sys, bmp; bmp.ciff2bmp(sys.argv[1], sys.argv[2], int(sys.argv[3]), False)"
INSTALL = "pip install bmp==0.2.8 (or pip install -e '.[engines]')"
SENTINEL = "\x01"  # the term of the sentinel block, queued last by every query (at weight 1)
SENTINEL_DOC = "s"  # the sentinel documents' names (real documents are named by their row number)
INDEX, FORWARD = "index.bmp", "forward"  # the files of a BMP index's folder


def import_bmp() -> Any:
    """The ``bmp`` module; a clear error with the install command when it is missing."""
    try:
        import bmp
    except ImportError:
        raise ImportError(f"index=bmp needs the BMP engine, which is not installed: {INSTALL}") from None
    return bmp


def ciff_to_bmp(ciff: Path, path: Path, block_size: int) -> None:
    """BMP's own CIFF reader (``bmp.ciff2bmp``) turns ``ciff`` into the index ``path``, in a child process.

    On a bad file ``ciff2bmp`` exits the process it runs in; in a child that becomes a clear error here.
    """
    done = subprocess.run([sys.executable, "-c", CIFF2BMP, str(ciff), str(path), str(block_size)], capture_output=True,
                          text=True, check=False)  # fmt: skip
    if done.returncode != 0 or not path.exists():
        raise RuntimeError(f"bmp.ciff2bmp failed on {ciff} (exit {done.returncode}): {done.stderr.strip()[-2000:]}")


def query_impacts(weights: torch.Tensor, term_max: torch.Tensor) -> tuple[torch.Tensor, float, int]:
    """A query's (|V|,) weights → its integer impacts (0 for terms left out), their scale, and the terms cut.

    The scale puts the largest weight at :data:`QUERY_LEVELS`. Where the impacts times ``term_max`` (|V|,), each
    term's largest document impact, could sum past :data:`SCORE_LIMIT`, the scale is lowered until they cannot, but
    not below :data:`QUERY_MIN_LEVELS` for the largest weight; past that, the lowest-weighted terms are cut. Terms no
    document has are left out. No document's score, nor a block's bound, can then pass the limit.
    """
    largest = float(weights.max())
    scale, floor = QUERY_LEVELS / largest, QUERY_MIN_LEVELS / largest
    while True:
        impacts = torch.where(term_max > 0, quantize(weights, scale), 0)
        bound = int((impacts * term_max).sum())
        if bound <= SCORE_LIMIT or scale <= floor:
            break
        scale = max(floor, scale * SCORE_LIMIT / bound * (1 - 1e-9))
    order = torch.argsort(weights, descending=True, stable=True)
    cut = order[torch.cumsum(impacts[order] * term_max[order], dim=0) > SCORE_LIMIT]
    cut = cut[impacts[cut] > 0]
    impacts[cut] = 0
    return impacts, scale, len(cut)


def bmp_files(shards: CorpusShards, corpus: ImpactCorpus, discard: int, block_size: int, root: Path,
              rescore: bool) -> tuple[Path, ForwardImpacts | None]:  # fmt: skip
    """The corpus's impacts as BMP's ``index.bmp`` in ``root`` (and, with ``rescore``, a forward index beside it).

    They go through a CIFF file with the sentinel block (module docstring): terms named by their ids, documents by
    their rows; the sentinel documents come after the last document's block, filled, and their term
    (:data:`SENTINEL`) sorts before every id, as CIFF's lists are ordered. Sets ``corpus.postings``.
    """
    spilled = spill(shards, discard, corpus.scale, root / "impacts")
    corpus.postings, documents = int(spilled.df.sum()), len(corpus.docids)
    fillers = -documents % block_size + block_size
    count, lists = term_lists(spilled, lambda ids: [str(i) for i in ids])
    sentinel = (SENTINEL, np.arange(documents, documents + fillers), np.ones(fillers, dtype=np.int64))
    names = chain(map(str, range(documents)), (f"{SENTINEL_DOC}{filler}" for filler in range(fillers)))
    lengths = np.concatenate([spilled.doc_lengths, np.ones(fillers, dtype=np.int64)])
    description = f"retrieval_zoo BMP index: {documents:,} documents' 8-bit impacts, terms by vocabulary id"
    ciff = write_ciff(root / "index.ciff", chain([sentinel], lists), count + 1, names, lengths, description)
    forward = ForwardImpacts.write(spilled, LEVELS, root / FORWARD) if rescore else None
    shutil.rmtree(spilled.folder)
    ciff_to_bmp(ciff, root / INDEX, block_size)
    ciff.unlink()
    return root / INDEX, forward
