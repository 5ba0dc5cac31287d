from pathlib import Path

from retrieval_zoo.loggers import wandb_mode


def test_wandb_mode_is_offline_without_a_key(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    assert wandb_mode() == "offline"


def test_wandb_mode_respects_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode() == "disabled"


def test_wandb_mode_is_offline_with_a_key_but_no_network(monkeypatch) -> None:
    import socket

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)

    def unreachable(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr(socket, "create_connection", unreachable)
    assert wandb_mode() == "offline"
