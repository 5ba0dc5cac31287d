"""Term weights as (n, |V|) matrices, dense or sparse CSR: how ``term_weights`` travel from encoder to index.

A ``term_weights`` method hands its lexical vectors over in whichever form is smaller: dense float32 (DeLADE's
softmax bag of words, Eq. 23 of delade-dhr.md, is non-zero almost everywhere) or a torch sparse CSR tensor (BM25's
vectors over an analysed vocabulary of millions of terms; SPLADE's few hundred terms out of 30,522). Batches,
shards and indexes read both through these functions, which never turn a CSR matrix dense whole: a dense block
exists for a batch of rows at most (:func:`dense_rows`). torch's CSR tensors multiply a dense matrix (on CPU and
CUDA) but cannot be sliced, concatenated or gathered by rows; those are written here on their three arrays.

CSR indices are int32 while the entries fit (as the exact sparse index stores them), int64 beyond.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import torch

# torch warns that sparse CSR support is in beta; what is used of it (building one, multiplying a dense matrix,
# reading its arrays) is covered by tests.
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)


def is_csr(matrix: torch.Tensor) -> bool:
    """Whether ``matrix`` is a sparse CSR tensor (else dense)."""
    return matrix.layout == torch.sparse_csr


def csr(offsets: torch.Tensor, columns: torch.Tensor, values: torch.Tensor, width: int) -> torch.Tensor:
    """A (len(offsets) − 1, width) CSR matrix from its row ``offsets``, entry ``columns`` and ``values``.

    Built in inference mode (term weights are never differentiated): a CSR tensor made outside it from views of
    inference tensors (shards encoded under ``torch.inference_mode``) cannot give its arrays back.
    """
    dtype = index_dtype(values.numel(), width)
    with torch.inference_mode():
        return torch.sparse_csr_tensor(offsets.to(dtype), columns.to(dtype), values, (len(offsets) - 1, width),
                                       check_invariants=False)  # fmt: skip


def index_dtype(entries: int, width: int) -> torch.dtype:
    """int32 for the row offsets and column ids of a CSR matrix while they fit, else int64."""
    return torch.int32 if max(entries, width) < 2**31 else torch.int64


def parts(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(n + 1,) int64 row offsets, (nnz,) int64 columns and (nnz,) values of a CSR matrix's entries."""
    return matrix.crow_indices().long(), matrix.col_indices().long(), matrix.values()


def to_csr(matrix: torch.Tensor) -> torch.Tensor:
    """``matrix`` as CSR (its non-zero entries); a CSR matrix as it is.

    On a GPU, listing the entries (``nonzero``) is the one wait for the device: the row offsets are counted from the
    rows themselves (``torch.bincount`` of the entries' rows would read the largest back as well).
    """
    if is_csr(matrix):
        return matrix
    rows, columns = torch.nonzero(matrix, as_tuple=True)
    offsets = torch.zeros(matrix.shape[0] + 1, dtype=torch.int64, device=matrix.device)
    offsets[1:] = torch.cumsum(torch.count_nonzero(matrix, dim=1), 0)
    return csr(offsets, columns, matrix[rows, columns], matrix.shape[1])


def offsets_of(rows: torch.Tensor, count: int) -> torch.Tensor:
    """(count + 1,) int64 row offsets of entries whose (nnz,) rows are ``rows``, in row order."""
    offsets = torch.zeros(count + 1, dtype=torch.int64, device=rows.device)
    offsets[1:] = torch.cumsum(torch.bincount(rows, minlength=count), 0)
    return offsets


def entry_rows(offsets: torch.Tensor, entries: int) -> torch.Tensor:
    """(nnz,) the row of each entry, from (n + 1,) row offsets.

    ``entries`` is the nnz (the columns' length), which the caller knows: given it, a GPU's host need not wait to read
    the last offset back.
    """
    rows = torch.arange(len(offsets) - 1, device=offsets.device)
    return torch.repeat_interleave(rows, offsets.diff(), output_size=entries)


def row_range(matrix: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Rows ``start`` to ``stop`` (exclusive) of ``matrix``, in its layout."""
    if not is_csr(matrix):
        return matrix[start:stop]
    # the arrays as stored: parts() would convert a whole matrix's indices to int64 for every block cut from it
    offsets, columns, values = matrix.crow_indices(), matrix.col_indices(), matrix.values()
    stop = min(stop, matrix.shape[0])
    first, last = int(offsets[start]), int(offsets[stop])
    return csr(offsets[start : stop + 1] - first, columns[first:last], values[first:last], matrix.shape[1])


def dense_rows(matrix: torch.Tensor, start: int = 0, stop: int | None = None) -> torch.Tensor:
    """Rows ``start`` to ``stop`` (default: the end) of ``matrix`` as a dense tensor."""
    block = row_range(matrix, start, matrix.shape[0] if stop is None else stop)
    if not is_csr(block):
        return block
    offsets, columns, values = parts(block)
    dense = torch.zeros(tuple(block.shape), dtype=values.dtype, device=values.device)
    dense[entry_rows(offsets, len(columns)), columns] = values
    return dense


def each_row(matrix: torch.Tensor, block: int = 64) -> Iterator[torch.Tensor]:
    """Each row of ``matrix`` as a dense (|V|,) tensor, ``block`` rows densified at a time."""
    for start in range(0, matrix.shape[0], block):
        yield from dense_rows(matrix, start, start + block)


def take_rows(matrix: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The ``rows`` (m,) of ``matrix``, in that order, in its layout."""
    if not is_csr(matrix):
        return matrix[rows]
    offsets, columns, values = parts(matrix)
    counts = offsets[rows + 1] - offsets[rows]
    out_offsets = torch.zeros(len(rows) + 1, dtype=torch.int64)
    out_offsets[1:] = torch.cumsum(counts, 0)
    # entry j of output row i is input entry offsets[rows[i]] + j
    entries = torch.arange(int(out_offsets[-1])) + (offsets[rows] - out_offsets[:-1]).repeat_interleave(counts)
    return csr(out_offsets, columns[entries], values[entries], matrix.shape[1])


def cat_rows(matrices: list[torch.Tensor]) -> torch.Tensor:
    """The rows of ``matrices`` (one width, one layout: dense or CSR) stacked in order."""
    if not is_csr(matrices[0]):
        return torch.cat(matrices)
    width, entries = matrices[0].shape[1], sum(matrix.values().numel() for matrix in matrices)
    dtype = index_dtype(entries, width)
    offsets = torch.zeros(sum(matrix.shape[0] for matrix in matrices) + 1, dtype=dtype)
    columns, values = torch.empty(entries, dtype=dtype), torch.empty(entries, dtype=matrices[0].values().dtype)
    row = entry = 0
    for matrix in matrices:  # filled in place: no list of parts concatenated beside the result
        part_offsets, part_columns, part_values = parts(matrix)
        offsets[row + 1 : row + matrix.shape[0] + 1] = part_offsets[1:] + entry
        columns[entry : entry + len(part_values)] = part_columns
        values[entry : entry + len(part_values)] = part_values
        row, entry = row + matrix.shape[0], entry + len(part_values)
    return csr(offsets, columns, values, width)


def columns_from(matrix: torch.Tensor, first: int) -> torch.Tensor:
    """Columns ``first`` onwards of ``matrix`` (n, |V| − first), in its layout: leading ids dropped (BERT's unused)."""
    if not is_csr(matrix) or first == 0:
        return matrix[:, first:] if first else matrix
    offsets, columns, values = parts(matrix)
    keep = columns >= first
    kept = offsets_of(entry_rows(offsets, len(columns))[keep], matrix.shape[0])
    return csr(kept, columns[keep] - first, values[keep], matrix.shape[1] - first)


def column_max(matrix: torch.Tensor) -> torch.Tensor:
    """(|V|,) each column's largest entry; a CSR matrix's missing entries count as 0 (term weights are ≥ 0)."""
    if not is_csr(matrix):
        return matrix.amax(dim=0)
    _, columns, values = parts(matrix)
    largest = torch.zeros(matrix.shape[1], dtype=values.dtype, device=values.device)
    return largest.scatter_reduce(0, columns, values, "amax")


def nonzeros(matrix: torch.Tensor) -> int:
    """Non-zero entries of ``matrix``."""
    return int(torch.count_nonzero(matrix.values() if is_csr(matrix) else matrix))


def nbytes(matrix: torch.Tensor) -> int:
    """Bytes ``matrix`` holds (CSR: its three arrays)."""
    held = [matrix.values(), matrix.col_indices(), matrix.crow_indices()] if is_csr(matrix) else [matrix]
    return sum(t.numel() * t.element_size() for t in held)
