"""CSFs per document of one trained CSurF model encoded in fp32 and under bf16 autocast, side by side.

Separates the precision of encoding from the precision of training: the same weights, the same tokens, the two
precisions. Prints the CSFs per document (expansion and original), and the CSFs that bf16 adds or loses with their
weights. A GPU node runs it with ``--device cuda``.

    python -m benchmarks.csf_precision outputs/<a csurf run> [--docs 64] [--device cpu]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from benchmarks.common import header
from retrieval_zoo.data.collections import embedded
from retrieval_zoo.lexical.csf_bags import CsfBags
from retrieval_zoo.trained import load_trained, trained_config


def pairs(bags: CsfBags) -> dict[tuple[int, int], float]:
    """(text, surface form) → weight of each CSF."""
    keys = zip(bags.text.tolist(), bags.surface.tolist(), strict=True)
    return dict(zip(keys, bags.weight.float().tolist(), strict=True))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path, help="a train.py output directory of a CSurF run")
    parser.add_argument("--docs", type=int, default=64)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    model = load_trained(args.run_dir, trained_config(args.run_dir)).eval().to(device)
    corpus = embedded("default").corpus
    texts = [corpus[d] for d in list(corpus)[: args.docs]]
    header(f"CSurF's CSFs per document in fp32 and bf16 on {device} ({args.docs} documents)")
    with torch.inference_mode():
        tokens = model.encoder.text_tokenizer()(texts, "doc").to(device)
        encoded = {"fp32": model.encode_doc(tokens)}
        with torch.autocast(device.type, dtype=torch.bfloat16):
            encoded["bf16"] = model.encode_doc(tokens)
    print("| precision | CSFs / doc | expansion / doc | original / doc |")
    print("|---|---|---|---|")
    for name, bags in encoded.items():
        original = int(bags.original.sum())
        print(f"| {name} | {len(bags.text) / len(texts):.1f} | {(len(bags.text) - original) / len(texts):.1f} | "
              f"{original / len(texts):.1f} |")  # fmt: skip
    fp32, bf16 = pairs(encoded["fp32"]), pairs(encoded["bf16"])
    added = torch.tensor([w for key, w in bf16.items() if key not in fp32] or [0.0])
    lost = torch.tensor([w for key, w in fp32.items() if key not in bf16] or [0.0])
    print(f"\nbf16 adds {(len(bf16.keys() - fp32.keys())) / len(texts):.1f} CSFs a document (weight median "
          f"{added.median():.4f}, max {added.max():.4f}) and loses {len(fp32.keys() - bf16.keys()) / len(texts):.1f} "
          f"(median {lost.median():.4f})")  # fmt: skip


if __name__ == "__main__":
    main()
