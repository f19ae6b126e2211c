#!/bin/bash
# Issue 32: mmdsynth's table methods on the same splits (1 torch thread, beside the peer runs).
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MMDSYNTH_DATA_DIR=${MMDSYNTH_DATA_DIR:-/work/shared/datasets}
OUT=benchmarks/out/mmdsynth_issue32_fit.jsonl
LOG=benchmarks/out/mmdsynth_issue32.log
for spec in "$@"; do            # e.g. "dp-merf adult 1"
  set -- $spec
  echo "$(date -u +%FT%TZ) start $spec" >> $LOG
  .venv/bin/python benchmarks/peers/run_mmdsynth.py benchmarks/out/splits/$2_s0 --method $1 --epsilon $3 \
      --delta 1e-5 --out $OUT >> $LOG 2>&1
  rc=$?                         # before the date below, whose command substitution would reset $?
  echo "$(date -u +%FT%TZ) end $spec rc=$rc" >> $LOG
done
