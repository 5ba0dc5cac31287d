#!/usr/bin/env bash
# One lent GPU machine's measurements (../shared/GPU.md), run from the repository root there:
#   bash benchmarks/gpu_session.sh STAGE...   STAGE: check, bf16, e2e, compiled, syncs, recheck, csurf_shapes,
#                                             compiled_step, fixed_cost, delade_softmax, grounding,
#                                             csurf_precision, search_syncs, recipes, profile, scale
# Needs .gpu/ prepared on a machine with the package index and Java (benchmarks/gpu_prepare.sh). Each stage writes
# its log under $OUT (or /tmp/gpu_out) as it runs, so a command stopped at its limit still returns what it measured.
set -uo pipefail
out=${OUT:-/tmp/gpu_out}
mkdir -p "$out"
# The wheels (36 MB) and the BM25 caches may travel in separate calls (64 MiB a call): a warm machine keeps /tmp/site
if compgen -G ".gpu/whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .gpu/whl/*.whl || exit 1
elif [ ! -d /tmp/site/hydra ]; then
  echo "no wheels in .gpu/whl and none installed in /tmp/site: carry .gpu/whl (benchmarks/gpu_prepare.sh)"; exit 1
fi
export PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 WANDB_MODE=offline OPENAI_API_KEY=dummy PYTHONUNBUFFERED=1
mkdir -p ~/.cache/retrieval_zoo && for f in .gpu/cache_*.tar.xz; do [ -f "$f" ] && tar xJf "$f" -C ~/.cache/retrieval_zoo; done
throughput=(python3 -m benchmarks.gpu_throughput --device cuda --backbone bert_base_random --precision bf16
  --bm25 replay=.gpu/bm25.pkl.gz)

table='^\||^##|CSurF|end to end|Error|error:|Traceback'  # the tables and failures, not the progress bars

for stage in "$@"; do
  echo "=== $stage $(date -u +%T)"
  case $stage in
    check)
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
      python3 -c "import torch, transformers, lightning; print('torch', torch.__version__, 'transformers',
        transformers.__version__, 'lightning', lightning.__version__, torch.cuda.get_device_name())"
      cat .gpu/commit
      python3 -c "import retrieval_zoo.evaluation.pipeline" && python3 train.py --cfg job >/dev/null && echo compose ok
      # what faiss-gpu-cu12 (the gpu extra) would load: CUDA 12's cuBLAS and runtime, beside torch's own CUDA libraries
      echo "CUDA 12 libraries: $( (ldconfig -p; find /usr /opt /lib /lib64 -xdev \( -name 'libcublas.so.12*' -o -name 'libcudart.so.12*' \) \
        2>/dev/null) | grep -oE 'libcu(blas|dart)\.so\.12[^ ]*' | sort -u | tr '\n' ' ')"
      python3 -c "import os, nvidia; print('torch CUDA wheels:', sorted(os.listdir(nvidia.__path__[0])))" ;;
    bf16)
      "${throughput[@]}" --methods "${BF16_METHODS:-dense,clear,roc,delade_cls,csurf,dlr_splade,dhr_bm25_dense}" 2>&1 | tee "$out/bf16.log" | tr '\r' '\n' | grep -E "$table" ;;
    e2e)  # E2E_RUNS runs one after the other: the first on a cold machine (files, bytecode), the next warm
      for run in $(seq "${E2E_RUNS:-1}"); do
        start=$(date +%s)
        # each line stamped with the milliseconds since the start, so the log shows where the time goes
        start_ms=$(($(date +%s%N) / 1000000))
        python3 train.py trainer=gpu logger=csv trainer.enable_progress_bar=false hydra.run.dir=/tmp/runs/default_$run \
          2>&1 | stdbuf -oL tr '\r' '\n' \
          | while IFS= read -r line; do echo "$(($(date +%s%N) / 1000000 - start_ms)) $line"; done > "$out/e2e_$run.log"
        echo "python train.py trainer=gpu (run $run): rc ${PIPESTATUS[0]} in $(($(date +%s) - start)) s"
        grep -vE "it/s]|batch/s]|chunk/s]" "$out/e2e_$run.log" | tail -25
      done ;;
    compiled)
      "${throughput[@]}" --compile --methods "${COMPILED_METHODS:-dense,csurf}" 2>&1 | tee "$out/compiled.log" \
        | tr '\r' '\n' | grep -E "$table" ;;
    syncs)  # torch.cuda.set_sync_debug_mode: each host synchronisation by source line (no BM25 record needed)
      python3 -m benchmarks.gpu_throughput --device cuda --backbone bert_base_random --precision bf16 --sync-debug \
        --methods "${SYNC_METHODS:-dense,delade_cls,csurf,dlr_splade}" --repeat 1 --docs 256 --queries 0 2>&1 \
        | tee "$out/syncs.log" | tr '\r' '\n' | grep -E "$table|^syncs" ;;
    recheck)  # a short re-measure of what changed: the trained methods that need no BM25 record, with their syncs
      python3 -m benchmarks.gpu_throughput --device cuda --backbone bert_base_random --precision bf16 --sync-debug \
        --methods "${RECHECK_METHODS:-dense,delade_cls,dlr_splade}" --repeat 3 --queries 0 2>&1 \
        | tee "$out/recheck.log" | tr '\r' '\n' | grep -E "$table|^syncs" ;;
    csurf_shapes)  # CSurF's step in fixed shapes (the CUDA default) beside the listed bags', syncs and fixed cost too;
      # compiled: fixed shapes with the CSF code compiled (method.compile_csfs=true)
      for shapes in ${CSURF_SHAPES:-fixed compiled data}; do
        overrides=(--override method.step_shapes=$shapes)
        [ "$shapes" = compiled ] && overrides=(--override method.step_shapes=fixed --override method.compile_csfs=true)
        python3 -m benchmarks.gpu_throughput --device cuda --backbone bert_base_random --precision bf16 --sync-debug \
          --methods csurf "${overrides[@]}" --repeat 3 --queries 0 --docs 256 --fixed-cost 2>&1 \
          | tee "$out/csurf_$shapes.log" | tr '\r' '\n' | grep -E "$table|^syncs"
      done ;;
    compiled_step)  # the kernels CSurF's tiny fixed-shape step launches, eager against method.compile_csfs=true
      python3 -m benchmarks.compiled_step --device cuda --bm25 replay=.gpu/bm25.pkl.gz 2>&1 \
        | tee "$out/compiled_step.log" | tr '\r' '\n' | grep -E "$table" ;;
    fixed_cost)  # every trained method's tiny step ÷ the bare backbone's, the 1.5 target where it is meant: on a GPU
      python3 -m benchmarks.gpu_throughput --device cuda --backbone tiny_random --precision bf16 --fixed-cost \
        --methods "${FIXED_METHODS:-dense,clear,roc,delade_cls,csurf}" --repeat 1 --queries 0 --docs 64 \
        --bm25 replay=.gpu/bm25.pkl.gz 2>&1 | tee "$out/fixed_cost.log" | tr '\r' '\n' | grep -E "$table" ;;
    delade_softmax)  # Eq. 23's forward and backward: the CPU's exact path against the fused softmax training takes here
      python3 -m benchmarks.delade_softmax --device cuda --dtype bfloat16 2>&1 | tee "$out/delade_softmax.log" \
        | grep -E "$table" ;;
    grounding)  # CSurF's forms grounded on their source vectors: a gather of rows against the one-hot product
      python3 -m benchmarks.csf_grounding --device cuda 2>&1 | tee "$out/grounding.log" | grep -E "$table" ;;
    csurf_precision)  # |C^d| and MRR@10 in each precision over ${SEEDS}: a seed's spread is as wide as the gap
      for precision in bf16-mixed 32-true; do
        start=$(date +%s)
        for seed in ${SEEDS:-13 1 2}; do  # the seeds of one precision train side by side on the one GPU
          python3 train.py experiment=csurf trainer=gpu trainer.precision=$precision logger=csv seed=$seed \
            resume_from=null trainer.enable_progress_bar=false hydra.run.dir=/tmp/runs/csurf_${precision}_$seed \
            > "$out/csurf_${precision}_$seed.log" 2>&1 &
        done
        wait
        echo "csurf $precision: $(($(date +%s) - start)) s"
        for seed in ${SEEDS:-13 1 2}; do
          run=/tmp/runs/csurf_${precision}_$seed
          python3 -c "import json; d = json.load(open('$run/results.json'))
print('seed $seed: |C^d|', round(d['lexical_nonzero_per_doc'], 1), 'MRR@10', round(d['metrics']['csurf']['MRR@10'], 4))" \
            || tail -5 "$out/csurf_${precision}_$seed.log"
          cp "$run/results.json" "$out/csurf_${precision}_$seed.json" 2>/dev/null
        done
      done ;;
    search_syncs)  # each index family's search, torch's own count of its host syncs by source line (issue 44 item 1)
      python3 -m benchmarks.search_syncs --device cuda --bm25 replay=.gpu/bm25.pkl.gz 2>&1 \
        | tee "$out/search_syncs.log" | tr '\r' '\n' | grep -E "$table|^syncs" ;;
    recipes)  # issue 47: each *_msmarco recipe's step and encoding rate, hence its hours
      python3 -m benchmarks.recipe_rates --device cuda --precision bf16 --bm25 replay=.gpu/bm25.pkl.gz 2>&1 \
        | tee "$out/recipes.log" | tr '\r' '\n' | grep -E "$table" ;;
    scale)  # issue 47: the scale harness here, size by size (SCALE_SIZES), resumable; results.json written into $out
      mkdir -p /tmp/scale && ln -sf "$(realpath "$out")/scale_results.json" /tmp/scale/results.json
      for size in ${SCALE_SIZES:-100000 1000000}; do
        python3 -m benchmarks.scale --sizes "$size" --work /tmp/scale --memory-limit-gib 100 --resume \
          --stages "${SCALE_STAGES:-encode_dense,encode_splade,gip_splade,sparse_splade,collection,faiss}" 2>&1 | tee -a "$out/scale.log" \
          | grep -E "$table|^\[scale\]"
      done ;;
    profile)  # op tables of the paths off target (benchmarks.gpu_profile); the whole log comes back under $out
      python3 -m benchmarks.gpu_profile --device cuda --backbone bert_base_random --precision bf16 \
        --bm25 replay=.gpu/bm25.pkl.gz --methods "${PROFILE_METHODS:-delade_cls,csurf,dlr_splade,dhr_bm25_dense}" \
        > "$out/profile.log" 2>&1; echo "profile: rc $?"; grep -E "^###|Traceback|Error" "$out/profile.log" ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
