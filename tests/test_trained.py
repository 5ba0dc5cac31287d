"""Which checkpoint of a ``train.py`` run is read back (``evaluate.py run_dir=``, the export, teachers)."""

from pathlib import Path

import pytest
import torch

from retrieval_zoo.trained import best_checkpoint

MONITOR = "ModelCheckpoint{'monitor': 'val/MRR@10', 'mode': 'max'}"
STEPS = "ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 50}"


def write(folder: Path, name: str, step: int, best: str | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    callbacks = {STEPS: {"monitor": None, "best_model_path": ""}}
    if best is not None:
        callbacks[MONITOR] = {"monitor": "val/MRR@10", "best_model_path": f"/elsewhere/checkpoints/{best}"}
    torch.save({"global_step": step, "callbacks": callbacks, "state_dict": {}}, folder / name)


def test_the_kept_checkpoint_wins_over_both_last_files_whatever_their_names(tmp_path: Path) -> None:
    # the default run's folder: the steps callback took last.ckpt first, so the epoch-end one wrote last-v1.ckpt;
    # "last-v1.ckpt" sorts before "zz", and a file system may list it first
    folder = tmp_path / "checkpoints"
    write(folder, "zz-epoch0-step133.ckpt", 133)
    write(folder, "last-v1.ckpt", 266, best="zz-epoch0-step133.ckpt")
    write(folder, "last.ckpt", 250)
    assert best_checkpoint(tmp_path) == folder / "zz-epoch0-step133.ckpt"


def test_with_several_kept_the_newest_checkpoint_names_the_best(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"  # checkpoint.save_top_k=2
    write(folder, "epoch0-step10.ckpt", 10, best="epoch0-step10.ckpt")
    write(folder, "epoch2-step30.ckpt", 30, best="epoch0-step10.ckpt")
    write(folder, "last-v1.ckpt", 40, best="epoch2-step30.ckpt")  # the newest: epoch 2 beat epoch 0 since
    write(folder, "last.ckpt", 35, best="epoch0-step10.ckpt")
    assert best_checkpoint(tmp_path) == folder / "epoch2-step30.ckpt"


def test_without_a_kept_checkpoint_the_newest_last_file_is_read(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    write(folder, "last-v1.ckpt", 20)
    write(folder, "last.ckpt", 50)
    assert best_checkpoint(tmp_path) == folder / "last.ckpt"


def test_no_checkpoint_or_no_recorded_best_is_an_error_naming_the_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no checkpoint under .*checkpoints"):
        best_checkpoint(tmp_path)
    folder = tmp_path / "checkpoints"
    write(folder, "epoch0-step10.ckpt", 10)
    write(folder, "epoch1-step20.ckpt", 20, best="epoch9-step90.ckpt")  # a best that is not there
    with pytest.raises(FileNotFoundError, match=r"epoch1-step20.ckpt: records no best checkpoint among"):
        best_checkpoint(tmp_path)


def test_a_saved_config_naming_a_moved_module_finds_its_class_where_it_is_now(tmp_path: Path, capsys) -> None:
    from omegaconf import OmegaConf

    from retrieval_zoo.trained import trained_config

    saved = {"method": {"_target_": "retrieval_zoo.methods.dense.DenseBiEncoder",
                        "encoder": {"_target_": "retrieval_zoo.encoder.Encoder"}},  # a run written before the move
             "index": {"_target_": "retrieval_zoo.index.dense.Faiss"}}  # fmt: skip
    OmegaConf.save(saved, tmp_path / "run_config.yaml")
    cfg = trained_config(tmp_path)
    assert cfg.method._target_ == "retrieval_zoo.methods.dense.DenseBiEncoder"  # unmoved: left as it was
    assert cfg.method.encoder._target_ == "retrieval_zoo.encoding.encoder.Encoder"
    assert cfg.index._target_ == "retrieval_zoo.index.vectors.faiss.Faiss"
    assert "method.encoder._target_ retrieval_zoo.encoder.Encoder is now" in capsys.readouterr().out


def test_a_saved_target_that_names_no_class_is_an_error_naming_the_file_and_key(tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    from retrieval_zoo.trained import trained_config

    OmegaConf.save({"method": {"_target_": "retrieval_zoo.methods.gone.Vanished"}}, tmp_path / "run_config.yaml")
    with pytest.raises(ValueError, match=r"run_config.yaml: method._target_ = retrieval_zoo.methods.gone.Vanished"):
        trained_config(tmp_path)
