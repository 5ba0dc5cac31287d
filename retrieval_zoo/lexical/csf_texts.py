"""Each text's CSFs where the encoder puts them (CSurF, csurf.md §3.2), before they are listed as bags.

A text has at most one expansion CSF per surface form t, (t, s_t) with weight w_t, and at most one original CSF per
position i, (x_i, i) with weight E_i[x_i]. :class:`TextCsfs` keeps them in the encoder's shapes, (T, |V|) by form
and (T, L) by position, a missing CSF weighing 0: sizes that follow from the batch's shape alone, so a training
step on a GPU (:mod:`retrieval_zoo.lexical.csf_fixed`) never reads a count back from the device.
:meth:`TextCsfs.listed` lists the CSFs that exist (:class:`~retrieval_zoo.lexical.csf_bags.CsfBags`), the form that
search and the inverted lists use.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from retrieval_zoo.bounds import require_choice
from retrieval_zoo.distributed import gather_rows, row_counts, world
from retrieval_zoo.lexical.csf_bags import Bags, CsfBags, cat_fields
from retrieval_zoo.rows import take_rows


@dataclass
class TextCsfs:
    """The CSFs of T texts of L positions, by surface form and by position.

    Attributes:
        expansion: (T, V) w_t of each form's expansion CSF, 0 where the text has none.
        sources: (T, V) s_t, the position that grounds each form (read only where w_t > 0).
        own: (T, L) E_i[x_i], the weight of each position's original CSF, 0 where it has none.
        ids: (T, L) x_i, each position's token: its original CSF's surface form.
        vectors: (T, L, dv) the positions' semantic vectors v_i, or None (weights only, |v| = 0).
        tokens: (T,) the number of source tokens of each text.
        kept: Which CSFs the texts keep: ``both`` (O ∪ E), ``original`` (O) or ``expansion`` (E).
    """

    expansion: torch.Tensor
    sources: torch.Tensor
    own: torch.Tensor
    ids: torch.Tensor
    vectors: torch.Tensor | None
    tokens: torch.Tensor
    kept: Bags

    def listed(self) -> CsfBags:
        """The CSFs that exist (weight > 0), one row each, expansion CSFs first, in row-major order of each part."""
        parts = []
        if self.kept != "original":
            text, surface = (self.expansion > 0).nonzero(as_tuple=True)
            parts.append((text, surface, self.sources[text, surface], self.expansion[text, surface], False))
        if self.kept != "expansion":
            text, position = (self.own > 0).nonzero(as_tuple=True)
            parts.append((text, self.ids[text, position], position, self.own[text, position], True))
        text, surface, source, weight = (torch.cat([p[i] for p in parts]) for i in range(4))
        original = torch.cat([torch.full_like(p[0], p[4], dtype=torch.bool) for p in parts])
        length = self.ids.shape[1]
        vector = None if self.vectors is None else take_rows(self.vectors.flatten(0, 1), text * length + source)
        return CsfBags(text, surface, source, weight, vector, original, len(self.ids), length, self.tokens)

    def term_weights(self) -> torch.Tensor:
        """(T, |V|) dense: each text's largest CSF weight for each surface form, its bag read with |v| = 0 (§3.4).

        A form's weight is w_t (§3.2) where the text has the expansion CSF, which is at least the self-projection
        weight of an original CSF of the same form, else that of its original CSFs: the maximum over the text's CSFs
        of the form, found in the encoder's shapes (every weight is ≥ 0 and a missing CSF weighs 0, the kinds that
        ``kept`` leaves out included). Mostly zero: the caller lists them (``to_csr``), a group of batches at a
        time where it encodes many. Listing the bags first (:meth:`listed`) would wait on the device four more
        times: their two ``nonzero``, a ``unique`` of (text, form) and two copies.
        """
        own = self.own.detach().float()  # 0 where a position has no original CSF, and everywhere for ``expansion``
        return self.expansion.detach().float().scatter_reduce(1, self.ids.long(), own, "amax")

    def texts(self, rows: slice) -> TextCsfs:
        """The CSFs of texts ``rows``."""
        vectors = None if self.vectors is None else self.vectors[rows]
        expansion, sources, own, ids = (part[rows] for part in (self.expansion, self.sources, self.own, self.ids))
        return TextCsfs(expansion, sources, own, ids, vectors, self.tokens[rows], self.kept)

    def padded(self, length: int) -> TextCsfs:
        """The same CSFs over ``length`` ≥ L positions: the positions added hold none."""
        pad = length - self.ids.shape[1]
        if pad == 0:
            return self
        vectors = None if self.vectors is None else F.pad(self.vectors, (0, 0, 0, pad))
        own, ids = F.pad(self.own, (0, pad)), F.pad(self.ids, (0, pad))
        return TextCsfs(self.expansion, self.sources, own, ids, vectors, self.tokens, self.kept)

    @staticmethod
    def cat(parts: list[TextCsfs]) -> TextCsfs:
        """The texts of ``parts`` (of one kind, one vocabulary) in order, padded to the longest."""
        length = max(part.ids.shape[1] for part in parts)
        return cat_fields([part.padded(length) for part in parts], kept=parts[0].kept)

    def counts(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(T,) |C| of each text and (T,) how many of them are original CSFs, read nothing back from the device."""
        original, expansion = (self.own > 0).sum(1), (self.expansion > 0).sum(1)  # a part not kept is all 0
        return expansion + original, original


def csf_texts(
    expansion: torch.Tensor,
    sources: torch.Tensor,
    self_weights: torch.Tensor,
    input_ids: torch.Tensor,
    source_mask: torch.Tensor,
    vectors: torch.Tensor | None,
    bags: Bags = "both",
) -> TextCsfs:
    """The CSFs C = O ∪ E of each text (§3.2), or O or E alone (Table 2), in the encoder's shapes.

    An original CSF whose token is also the grounding source of the expansion CSF of the same form is that same
    CSF (the union is a set), so it is kept once, as the expansion CSF.

    Args:
        expansion: (T, V) w_t = max_i E_i[t] over the source positions (Eq. of §3.2).
        sources: (T, V) s_t, the position that gives w_t.
        self_weights: (T, L) E_i[x_i], each token's weight for its own surface form.
        input_ids: (T, L) the tokens x_i.
        source_mask: (T, L) True at positions that are text tokens (not padding, not [CLS]/[SEP]).
        vectors: (T, L, dv) semantic vectors v_i, or None for weights only.
        bags: ``both`` (O ∪ E), ``original`` (O, COIL-tok-like) or ``expansion`` (E, SPLADE-like).
    """
    require_choice("bags", bags, Bags)
    keep = source_mask & (self_weights > 0)
    if bags == "both":  # (x_i, i) already in E when i grounds x_i's expansion CSF
        keep &= sources.gather(1, input_ids) != torch.arange(input_ids.shape[1], device=input_ids.device)
    own = torch.where(keep, self_weights, 0.0) if bags != "expansion" else torch.zeros_like(self_weights)
    if bags == "original":
        expansion = torch.zeros_like(expansion)
    return TextCsfs(expansion, sources, own, input_ids, vectors, source_mask.sum(1), bags)


def gather_texts(texts: TextCsfs) -> tuple[TextCsfs, int]:
    """Every rank's texts as one batch, in rank order, with gradients (in-batch negatives under DDP).

    Ranks pad to different lengths: the shorter texts are padded with positions that hold no CSF.

    Returns:
        The texts of all ranks, and the index of this rank's first text among them.
    """
    if world()[1] == 1:
        return texts, 0
    sizes, length = row_counts(len(texts.ids)), max(row_counts(texts.ids.shape[1]))
    texts = texts.padded(length)
    expansion, sources, own, ids, tokens = (
        gather_rows(part, sizes)[0] for part in (texts.expansion, texts.sources, texts.own, texts.ids, texts.tokens)
    )
    vectors = None if texts.vectors is None else gather_rows(texts.vectors, sizes)[0]
    return TextCsfs(expansion, sources, own, ids, vectors, tokens, texts.kept), sum(sizes[: world()[0]])
