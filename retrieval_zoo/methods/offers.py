"""Each method class as the types its declared representations stand for (:mod:`retrieval_zoo.index.representations`).

Nothing runs here: mypy (the README's test command) checks that every method class is a structural subtype of the
Protocol of each name in its ``representations``, so an index that reads a method through its Protocol reads
what the method has; ``tests/test_method_index_matrix.py`` checks that these lines and the declared names agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from retrieval_zoo.index.representations import (
        EncodesTermParts,
        OffersCsfBags,
        OffersLexicalSemantic,
        OffersTermWeights,
        OffersVectors,
    )
    from retrieval_zoo.methods.bm25 import BM25Method
    from retrieval_zoo.methods.clear import CLEAR
    from retrieval_zoo.methods.csurf import CSurF
    from retrieval_zoo.methods.delade import DeLADE
    from retrieval_zoo.methods.dense import DenseBiEncoder
    from retrieval_zoo.methods.dhr_fusion import DhrFusion
    from retrieval_zoo.methods.roc import RoC
    from retrieval_zoo.retriever import Represented

    bm25: type[Represented] = BM25Method
    dense: type[OffersVectors] = DenseBiEncoder
    clear: type[OffersVectors] = CLEAR
    roc_lexical_semantic: type[OffersLexicalSemantic] = RoC
    roc_vectors: type[OffersVectors] = RoC
    delade_term_weights: type[OffersTermWeights] = DeLADE
    delade_vectors: type[OffersVectors] = DeLADE
    delade_term_parts: type[EncodesTermParts] = DeLADE  # what TermWeightsFromParts reads
    csurf_bags: type[OffersCsfBags] = CSurF
    csurf_term_weights: type[OffersTermWeights] = CSurF
    csurf_term_parts: type[EncodesTermParts] = CSurF  # what TermWeightsFromParts reads
    dhr_fusion: type[OffersTermWeights] = DhrFusion
