"""The training DataLoader's dataset and its resumable loader."""

from __future__ import annotations

from torch.utils.data import DataLoader, Dataset

from retrieval_zoo.training.negatives import GroupSampling


class ResumableLoader(DataLoader):
    """The training DataLoader, with the sampler position Lightning saves in checkpoints (mid-epoch resume).

    ``consumed`` counts the batches handed to training steps in the current epoch (counted by
    :meth:`TriplesDataModule.on_before_batch_transfer`, not by the iterator, which Lightning reads one batch ahead).
    The DataModule saves and restores it (Lightning 2.6 restores a loader's own state only when the loader is built
    after the checkpoint is read, which ``estimated_stepping_batches`` prevents).
    """

    consumed: tuple[int, int] = (0, 0)  # (epoch, batches)

    def state_dict(self) -> dict[str, int]:
        """The epoch and the number of its batches trained on."""
        epoch, batches = self.consumed
        return {"epoch": epoch, "batches": batches}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Make the next pass over the saved epoch skip the batches already trained on."""
        self.consumed = (state["epoch"], state["batches"])
        self.sampler.resume_at(state["epoch"], state["batches"] * self.batch_size)


class GroupDataset(Dataset):
    """Map-style dataset indexed by (query index, epoch), as yielded by :class:`ShardedEpochSampler`."""

    def __init__(self, qids: list[str], sampling: GroupSampling) -> None:
        self.qids, self.sampling = qids, sampling

    def __len__(self) -> int:
        return len(self.qids)

    def __getitem__(self, item: tuple[int, int]) -> tuple[str, list[str]]:
        index, epoch = item
        qid = self.qids[index]
        return qid, self.sampling.group(qid, epoch)
