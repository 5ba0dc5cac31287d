"""What a run prints reaches its log file (without progress-bar redraws), and library notices are silenced."""

import logging
import sys

from retrieval_zoo import run_output


def test_printed_text_reaches_the_log_file_without_bar_redraws(tmp_path, monkeypatch) -> None:
    log_file = tmp_path / "train.log"
    with run_output.tee_output(log_file):
        print("[train] epoch 1/2: batch 7/133")
        sys.stderr.write("\rdocs:  50%|#####     | 1/2")  # a tqdm redraw: for the terminal only
        print("error: something", file=sys.stderr)
    assert log_file.read_text() == "[train] epoch 1/2: batch 7/133\nerror: something\n"
    assert not isinstance(sys.stdout, run_output._Tee)  # restored


def test_a_rank_other_than_0_writes_its_own_log(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(run_output.rank_zero_only, "rank", 2)
    with run_output.tee_output(tmp_path / "train.log"):
        print("rank 2")
    assert (tmp_path / "train.rank2.log").read_text() == "rank 2\n" and not (tmp_path / "train.log").exists()


def test_lightning_notices_a_user_cannot_act_on_are_dropped(caplog) -> None:
    run_output.quiet_library_notices()
    run_output.quiet_library_notices()  # idempotent: one filter
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    assert sum(isinstance(f, run_output._DropNotices) for f in logger.filters) == 1
    with caplog.at_level(logging.INFO, logger=logger.name):
        logger.info("💡 Tip: For seamless cloud uploads and versioning, try installing [litmodels]")
        logger.info("`Trainer(limit_predict_batches=1.0)` was configured so 100% of the batches will be used..")
        logger.info("GPU available: False, used: False")
    assert [r.getMessage() for r in caplog.records] == ["GPU available: False, used: False"]
