"""The run's config checked against what its classes take, before any collection is read or index built.

Hydra would reject a stale key or a wrong type only when it instantiates a node, and the DataModule is instantiated
after BM25 has indexed the corpus; a typo then costs the indexing and fails deep inside a constructor. Here every
node with a ``_target_`` is held to its target's signature (each key a parameter, each value of the annotated type)
and the ``eval`` block to its ranges, so ``data.batch_size=abc`` or ``eval.k=0`` fails at once, naming the key.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from hydra.utils import get_method
from omegaconf import DictConfig, ListConfig, OmegaConf

from retrieval_zoo.bounds import AtLeast
from retrieval_zoo.evaluation.pipeline import check_method_and_index

HYDRA_KEYS = {"_target_", "_partial_", "_recursive_", "_convert_", "_args_"}
EVAL_MINIMUMS = {"k": 1, "tune_queries": 0, "roc_k": 1, "explain": 0}  # eval.<key> is an integer at least this


def check_config(cfg: DictConfig) -> None:
    """Fail on the first key the run's classes do not take, or value they cannot, and on a method × index mismatch.

    Raises:
        ValueError: Naming the key (``data.batch_size``), the value, and what is expected.
    """
    for key, minimum in EVAL_MINIMUMS.items():  # first: other nodes interpolate them (data.holdout_queries)
        value = OmegaConf.select(cfg, f"eval.{key}")
        if value is not None and (type(value) is not int or value < minimum):
            raise ValueError(f"eval.{key}={value!r}: expected an integer ≥ {minimum}")
    for path, node in target_nodes(cfg):
        check_node(path, node)
    check_method_and_index(cfg)


def target_nodes(node: DictConfig, path: str = "") -> Iterator[tuple[str, DictConfig]]:
    """(dotted path, node) of every node with a ``_target_`` below ``node`` (Hydra's own settings left out)."""
    for key in node:
        if not path and key == "hydra":
            continue
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not OmegaConf.is_missing(node, key):
            where = f"{path}.{key}" if path else str(key)
            if "_target_" in child:
                yield where, child
            yield from target_nodes(child, where)


def check_node(path: str, node: DictConfig) -> None:
    """Each key of ``node`` a parameter of its target, each given value of the parameter's annotated type."""
    target = get_method(node._target_)
    signature = inspect.signature(target)
    try:
        hints = typing.get_type_hints(target.__init__ if inspect.isclass(target) else target, include_extras=True)
    except (NameError, TypeError):  # an annotation that cannot be resolved here: check the keys only
        hints = {}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())
    for key in node:
        if key in HYDRA_KEYS:
            continue
        if key not in signature.parameters and not takes_any:
            accepted = ", ".join(p for p in signature.parameters if p != "self")
            raise ValueError(f"{path}.{key}: {node._target_} takes no {key!r}; it takes: {accepted}")
        if OmegaConf.is_missing(node, key) or key not in hints:
            continue
        value = node[key]
        if not conforms(value, hints[key]):
            raise ValueError(f"{path}.{key}={value!r}: expected {describe(hints[key])}")


def conforms(value: object, hint: object) -> bool:
    """Whether a config value can stand for a parameter annotated ``hint`` (lenient where the hint is open)."""
    if hint is typing.Any or isinstance(value, DictConfig) and "_target_" in value:
        return True  # a nested object is checked as a node of its own
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:  # a type with bounds (retrieval_zoo.bounds): the type, then each bound
        bounds = [bound for bound in args[1:] if isinstance(bound, AtLeast)]
        return conforms(value, args[0]) and all(bound.accepts(value) for bound in bounds)
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, arg) for arg in args)
    if origin is typing.Literal:
        return value in args
    if hint is type(None):
        return value is None
    if hint is bool:
        return type(value) is bool
    if hint is int:
        return type(value) is int
    if hint is float:
        return type(value) in (int, float)
    if hint in (str, Path):
        return isinstance(value, str)
    container = origin or hint
    if inspect.isclass(container) and issubclass(container, (list, tuple, Sequence)) and container is not str:
        return isinstance(value, (ListConfig, list, tuple))
    if inspect.isclass(container) and issubclass(container, (dict, Mapping)):
        return isinstance(value, (DictConfig, dict))
    return True  # a class or protocol the config cannot name without a _target_: left to the constructor


def describe(hint: object) -> str:
    """A readable name for an annotation."""
    if typing.get_origin(hint) is typing.Annotated:
        base, *extras = typing.get_args(hint)
        return " ".join([describe(base), *(str(bound) for bound in extras if isinstance(bound, AtLeast))])
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(describe(arg) for arg in typing.get_args(hint))
    if typing.get_origin(hint) is typing.Literal:
        return " or ".join(repr(arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return "null"
    return getattr(hint, "__name__", str(hint))
