"""The package's import graph runs one way: no module imports from a layer above its own.

Read from the import statements of every module (``import`` and ``from ... import``, at any depth, type-only
imports included), so a cycle or an arrow back up fails here before it tangles the code.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "retrieval_zoo"

LAYERS = [  # lowest first; a module may import from its own layer and the ones below
    (
        "ground",
        {
            "cache",
            "rows",
            "compiling",
            "distributed",
            "encoding.batching",
            "resume",
            "loggers",
            "encoding.attention",
            "encoding.backbones",
            "losses",
            "id_index",
            "term_matrix",
            "encoding.tokens",
            "encoding.encoder",
            "encoding.precision",
            "hub_modules",
            "bounds",
            "host_work",
            "host_memory",
            "plots",  # matplotlib on Agg, a figure saved whole
            "conf",  # the configs shipped with the package (no code)
        },
    ),
    ("run loading", {"trained", "teachers"}),  # a trained run read back, as a model or a distillation teacher
    ("collections", {"data"}),  # collection and run files: reading, writing, checking
    (
        "measures",
        {
            "evaluation.metrics",
            "evaluation.tuning",
            "training.validation_metrics",
            "evaluation.complementarity",
            "evaluation.compare",
        },
    ),
    ("retrieval contract", {"retriever"}),  # what evaluation may ask of any retriever
    ("lexical", {"lexical"}),  # Lucene BM25, term vectors, CSFs
    ("training data", {"training"}),  # the DataModule, negatives, lookups
    ("indexes", {"index"}),
    ("methods", {"methods"}),
    (
        "runs",
        {
            "training.validation",
            "encoding.corpus",
            "evaluation.pipeline",
            "evaluation.stages",
            "evaluation.search_runs",
            "evaluation.config",
            "evaluation.summary",
            "config_check",
            "reproduce",
            "export",
            "run_output",
            "report",
        },
    ),
    ("python search", {"search_api"}),  # retrieval_zoo.Retriever: a trained run searched from Python
    ("command lines", {"cli", "jobs", "__main__"}),  # train, evaluate and search, installed or from the checkout
]


def unit(module: str) -> str:
    """The layer unit of ``retrieval_zoo.<unit>[.<rest>]``: ``<folder>.<module>`` where a folder's modules sit in
    different layers (``evaluation.metrics``, ``evaluation.pipeline``), else the folder or module."""
    parts = module.split(".")
    pair = ".".join(parts[1:3])
    return pair if any(pair in units for _, units in LAYERS) else parts[1]


def layer_of(module: str) -> int:
    name = unit(module)
    for number, (_, units) in enumerate(LAYERS):
        if name in units:
            return number
    raise AssertionError(f"{module}: not in any layer of tests/test_layers.py; place it there")


def imports(path: Path) -> set[str]:
    """The ``retrieval_zoo`` modules a file imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("retrieval_zoo."):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("retrieval_zoo.")}
    return found


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if len(parts) > 1 and parts[-1] != "__init__":
            found[".".join(parts)] = path
    return found


def test_every_module_has_a_layer() -> None:
    for module in modules():
        layer_of(module)


def test_no_import_runs_back_up() -> None:
    upward = []
    for module, path in sorted(modules().items()):
        for target in sorted(imports(path)):
            if layer_of(target) > layer_of(module):
                upward.append(
                    f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
                )
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "bad.py"
    module.write_text("from retrieval_zoo.methods.method import RetrievalMethod\n")
    (target,) = imports(module)
    assert layer_of(target) > layer_of("retrieval_zoo.index.vectors.faiss")
