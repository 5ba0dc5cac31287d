"""Search any query set with a trained run, an export or an untrained method, judged or not: TREC run files.

python search.py run_dir=outputs/2026-11-21/12-00-00 queries=topics.tsv      # qid<TAB>text lines
python search.py model_dir=exports/clear queries=queries.jsonl               # BEIR JSONL
python search.py run_dir=... queries=test                                    # a split of the dataset
python search.py method=bm25 queries=irds:msmarco-passage/trec-dl-2019      # ir_datasets' queries
"""

from retrieval_zoo.cli import search_main

if __name__ == "__main__":
    search_main()
