"""The model card of an exported folder (:mod:`retrieval_zoo.export.folder`): ``README.md`` in the Hugging Face format.

Front matter (library, license, tags), the run's metrics from its ``results.json``, the training data, backbone and
config, usage (``evaluate.py model_dir=``, ``retrieval_zoo.load``, and sentence-transformers where the folder loads
there), and the citation of the paper the method implements.
"""

from __future__ import annotations

import json

from omegaconf import DictConfig

CITATIONS = {
    "clear": "Luyu Gao, Zhuyun Dai, Tongfei Chen, Zhen Fan, Benjamin Van Durme and Jamie Callan. Complement Lexical "
    "Retrieval Model with Semantic Residual Embeddings. ECIR 2021.",
    "roc": "Dohyeon Lee, Seung-won Hwang, Kyungjae Lee, Seungtaek Choi and Sunghyun Park. On Complementarity "
    "Objectives for Hybrid Retrieval. ACL 2023.",
    "delade": "Sheng-Chieh Lin and Jimmy Lin. A Dense Representation Framework for Lexical and Semantic Matching. "
    "ACM Transactions on Information Systems, 2023.",
    "csurf": "Zhen Fan, Luyu Gao and Jamie Callan. CSurF: Sparse Lexical Retrieval through Contextualized Surface "
    "Forms. ICTIR 2023.",
}


def citation(method_name: str) -> str:
    """The paper a method implements (DeLADE's for ``delade*`` and the DLR/DHR fusions)."""
    key = next(
        (k for k in CITATIONS if method_name.startswith(k)), "delade" if method_name[:3] in ("dlr", "dhr") else ""
    )
    return CITATIONS.get(key, "The dense bi-encoder reference of retrieval_zoo (no paper).")


ECOSYSTEM_USAGE = {
    "SentenceTransformer": """
Without retrieval_zoo, with sentence-transformers (the markers are its prompts, each side cut where the method cuts):

```python
from sentence_transformers import SentenceTransformer

model = SentenceTransformer("<this folder>")
scores = model.similarity(model.encode_query(["what is a debian package"]), model.encode_document(["dpkg ..."]))
```
""",
    "SparseEncoder": """
Without retrieval_zoo, with sentence-transformers ({remote}):

```python
from sentence_transformers import SparseEncoder

model = SparseEncoder("<this folder>"{trust})
scores = model.similarity(model.encode_query(["what is a debian package"]), model.encode_document(["dpkg ..."]))
```
""",
}


def ecosystem_usage(loads_as: str | None, csurf: bool) -> str:
    """The model card's sentence-transformers snippet for a folder that loads as ``loads_as`` (none: empty)."""
    if loads_as is None:
        return ""
    remote = ("CSurF's expansion weights w_t; its pooling ships in the folder as modeling_csurf.py" if csurf
              else "SPLADE's term weights")  # fmt: skip
    return ECOSYSTEM_USAGE[loads_as].format(remote=remote, trust=", trust_remote_code=True" if csurf else "")


def model_card(run: DictConfig, results: dict, encoders: dict[str, str], usage: str = "") -> str:
    """``README.md`` in the Hugging Face model-card format: front matter, metrics, data, config, citation, usage.

    Args:
        run: The run's config.
        results: Its ``results.json`` (empty for an untrained method).
        encoders: The encoders' subfolders by module path.
        usage: A further usage snippet (:func:`ecosystem_usage`).
    """
    name, dataset = str(run.method_name), str(run.get("dataset_name", run.dataset.get("name", "")))
    rows = [f"| {system} | " + " | ".join(f"{value:.4f}" for value in metrics.values()) + " |"
            for system, metrics in results.get("metrics", {}).items()]  # fmt: skip
    measures = next(iter(results.get("metrics", {}).values()), {})
    table = "\n".join([f"| system | {' | '.join(measures)} |", "|---|" + "---|" * len(measures), *rows])
    tuned = results.get("tuning") or {}
    return f"""---
library_name: retrieval_zoo
license: apache-2.0
tags: [retrieval_zoo, information-retrieval, first-stage-retrieval, {name}]
---

# retrieval_zoo: `{name}` trained on `{dataset}`

Method `{name}` with the `{run.get("backbone_name", "")}` backbone, trained by retrieval_zoo (`python train.py`) on
`{dataset}` and evaluated on its `{results.get("split", "")}` split ({results.get("queries", "?")} queries, depth
{results.get("k", "?")}) with the index `{run.get("index_name", "")}`.

{table}

Retrieval-time weight tuned by the run: {json.dumps(tuned) if tuned else "none"}. The encoders are in
{", ".join(f"`{f}/`" for f in encoders.values())}; the training config is `run_config.yaml`.

## Usage

```bash
pip install -c constraints.txt -e .   # in a clone of retrieval_zoo (not on PyPI)
python evaluate.py model_dir=<this folder>               # the run's own evaluation, from this folder alone
python evaluate.py model_dir=<this folder> dataset=beir dataset.root=/data/beir/scifact
```

```python
import retrieval_zoo

model = retrieval_zoo.load("<this folder>")
queries = model.encode_query(["what is a debian package"])
```
{usage}
## Citation

{citation(name)}
"""
