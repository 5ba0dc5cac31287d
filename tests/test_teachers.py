"""Online teachers and DeLADE+[CLS]'s distillation over in-batch pairs (delade-dhr.md §4.2)."""

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from retrieval_zoo.losses import kl_distillation
from retrieval_zoo.methods.delade import DeLADE
from retrieval_zoo.teachers import CrossEncoder, TrainedBiEncoder
from retrieval_zoo.training.datamodule import TrainBatch
from tests.conftest import float32_rounding, tiny_encoder

CONF = Path(__file__).resolve().parents[1] / "retrieval_zoo" / "conf"


def tiny_run(root: Path, method: str = "dense") -> Path:
    """A train.py-like run directory of an untrained tiny model: its run_config.yaml and a checkpoint."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[f"method={method}", "backbone=tiny_random"])
    run = root / f"run_{method}"
    (run / "checkpoints").mkdir(parents=True)
    saved = {"method_name": method, "method": OmegaConf.to_container(cfg.method, resolve=True)}
    OmegaConf.save(OmegaConf.create(saved), run / "run_config.yaml")
    torch.save({"state_dict": instantiate(cfg.method).state_dict()}, run / "checkpoints" / "last.ckpt")
    return run


def batch(queries: int = 2, group: int = 2) -> TrainBatch:
    texts = ["apt package manager", "python web server", "image viewer", "audio player", "mail client", "text editor"]
    return TrainBatch(
        qids=[f"q{i}" for i in range(queries)],
        queries=texts[:queries],
        docids=[[f"d{i}{j}" for j in range(group)] for i in range(queries)],
        docs=[f"{texts[(i + j) % len(texts)]} for debian" for i in range(queries) for j in range(group)],
    )


def test_a_trained_bi_encoder_scores_every_pair_by_its_vectors(tmp_path) -> None:
    teacher = TrainedBiEncoder(str(tiny_run(tmp_path)))
    b = batch()
    scores = teacher.scores(b.queries, b.docs, torch.device("cpu"))
    with torch.no_grad():
        expected = teacher.model.encode_query(b.queries) @ teacher.model.encode_doc(b.docs).T
    assert scores.shape == (2, 4) and torch.allclose(scores, expected) and not scores.requires_grad
    paired = teacher.pair_scores([b.queries[1], b.queries[0], b.queries[1]], [b.docs[0], b.docs[3], b.docs[2]], "cpu")
    atol = float32_rounding(32) * float(expected.abs().max())  # row-wise products against one GEMM (width 32)
    assert torch.allclose(paired, expected[[1, 0, 1], [0, 3, 2]], rtol=0, atol=atol)
    with pytest.raises(ValueError, match="method=csurf produces no vectors"):
        TrainedBiEncoder(str(tiny_run(tmp_path, "csurf")))


def test_a_cross_encoder_scores_each_pair_jointly(tmp_path) -> None:
    from transformers import BertConfig, BertForSequenceClassification

    source = TrainedBiEncoder(str(tiny_run(tmp_path))).model.encoder.tokenizer
    torch.manual_seed(0)
    config = BertConfig(vocab_size=source.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, num_labels=1)  # fmt: skip
    BertForSequenceClassification(config).save_pretrained(tmp_path / "ce")
    source.save_pretrained(tmp_path / "ce")
    teacher, b = CrossEncoder(str(tmp_path / "ce"), batch_size=3), batch()
    scores = teacher.scores(b.queries, b.docs, torch.device("cpu"))
    inputs = teacher.tokenizer(b.queries[1], b.docs[2], return_tensors="pt")
    with torch.no_grad():
        one = teacher.model(**inputs).logits[0, 0]
    atol = float32_rounding(32 * 2) * abs(one.item())  # alone against padded in a batch: other sum orders
    assert scores.shape == (2, 4) and scores[1, 2] == pytest.approx(one.item(), rel=0, abs=atol)
    assert torch.allclose(teacher.pair_scores([b.queries[1]], [b.docs[2]], "cpu"), one.view(1), rtol=0, atol=atol)


class FixedTeacher:
    """Scores by a fixed (B, B·G) matrix, recording what it was asked."""

    def __init__(self, matrix: torch.Tensor, queries: list[str] = (), docs: list[str] = ()) -> None:
        self.matrix, self.calls, self.queries, self.docs = matrix, [], list(queries), list(docs)

    def scores(self, queries, docs, device):
        self.calls.append((list(queries), list(docs)))
        return self.matrix.to(device)

    def pair_scores(self, queries, docs, device):
        self.calls.append((list(queries), list(docs)))
        assert list(docs) == self.docs  # the group case pairs every document of the batch, in order, with its query
        rows = [self.queries.index(query) for query in queries]
        return self.matrix[rows, torch.arange(len(docs))].to(device)


def test_in_batch_distillation_is_kl_over_every_document_of_the_batch() -> None:
    torch.manual_seed(0)
    b, matrix = batch(), torch.tensor([[3.0, 0.0, 1.0, -1.0], [0.5, 0.0, 2.0, 1.0]])
    teacher = FixedTeacher(matrix)
    model = DeLADE(tiny_encoder(mlm_head=True), cls_dim=8, kd_weight=0.5, teacher=teacher).eval()
    assert model.needs == frozenset({"texts"}) and "teacher" not in dict(model.named_modules())  # its own tokenizer
    losses, diagnostics = model.losses(b)
    q, d = model.encode_query(b.queries), model.encode_doc(b.docs)
    # KL(p_t ‖ p_s) over the 4 documents of the batch, p = softmax of each query's row (Eq. 17's candidates).
    p_t, log_p_s = torch.softmax(matrix, dim=1), torch.log_softmax(q @ d.T, dim=1)
    by_hand = 0.5 * (p_t * (torch.log(p_t) - log_p_s)).sum(dim=1).mean()
    assert losses["kd"].item() == pytest.approx(by_hand.item(), rel=1e-4)
    assert teacher.calls == [(b.queries, b.docs)]
    assert diagnostics["kd/teacher_accuracy"].tolist() == [1.0, 1.0]  # rows 0 and 1 peak at columns 0 and 2


def test_without_in_batch_negatives_the_teacher_scores_each_query_s_own_group() -> None:
    torch.manual_seed(0)
    b, matrix = batch(), torch.tensor([[3.0, 0.0, 1.0, -1.0], [0.5, 0.0, 2.0, 1.0]])
    teacher = FixedTeacher(matrix, b.queries, b.docs)
    model = DeLADE(tiny_encoder(mlm_head=True), cls_dim=8, kd_weight=1.0, in_batch_negatives=False,
                   teacher=teacher).eval()  # fmt: skip
    student = model.encode_query(b.queries).unsqueeze(1) @ model.encode_doc(b.docs).view(2, 2, -1).transpose(1, 2)
    own = torch.tensor([[3.0, 0.0], [2.0, 1.0]])  # query 0: documents 0-1; query 1: documents 2-3
    assert model.losses(b)[0]["kd"].item() == pytest.approx(kl_distillation(student.squeeze(1), own).item(), rel=1e-4)
    assert teacher.calls == [([b.queries[0]] * 2 + [b.queries[1]] * 2, b.docs)]  # B·G pairs, not the whole batch


def test_a_teacher_without_a_kd_weight_is_refused_and_not_saved(tmp_path) -> None:
    with pytest.raises(ValueError, match="every KD weight is 0"):
        DeLADE(tiny_encoder(mlm_head=True), teacher=FixedTeacher(torch.zeros(1, 1)))
    model = DeLADE(tiny_encoder(mlm_head=True), kd_weight=1.0, teacher=TrainedBiEncoder(str(tiny_run(tmp_path))))
    assert not any(k.startswith("teacher") for k in model.state_dict())


def test_a_distilled_run_loads_for_evaluation_without_its_teacher(tmp_path) -> None:
    from retrieval_zoo.trained import load_trained, trained_config

    teacher_run = tiny_run(tmp_path)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=["experiment=delade_cls_kd_inbatch", "backbone=tiny_random",
                                                      f"method.teacher.run_dir={teacher_run}"])  # fmt: skip
    student = instantiate(cfg.method)
    assert isinstance(student.teacher, TrainedBiEncoder)
    run = tmp_path / "student"
    (run / "checkpoints").mkdir(parents=True)
    saved = {"method_name": "delade_cls", "method": OmegaConf.to_container(cfg.method, resolve=True)}
    OmegaConf.save(OmegaConf.create(saved), run / "run_config.yaml")
    torch.save({"state_dict": student.state_dict()}, run / "checkpoints" / "last.ckpt")
    teacher_run.rename(tmp_path / "moved")  # the teacher's run may be gone by evaluation time
    loaded = load_trained(run, trained_config(run))
    assert loaded.teacher is None  # evaluation encodes with the student alone
    assert torch.equal(loaded.state_dict()["term_weight.weight"], student.state_dict()["term_weight.weight"])
