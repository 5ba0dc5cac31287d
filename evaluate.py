"""Evaluate a trained run directory, or an untrained method, beside BM25.

python evaluate.py run_dir=outputs/2026-11-21/12-00-00      # the best checkpoint of a train.py run
python evaluate.py model_dir=exports/clear                    # a run exported by python -m retrieval_zoo.export
python evaluate.py method=bm25 dataset=msmarco_passage dataset.root=/data/msmarco
"""

from retrieval_zoo.cli import evaluate_main

if __name__ == "__main__":
    evaluate_main()
