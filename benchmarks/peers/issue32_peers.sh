#!/bin/bash
# Issue 32 peer runs, one at a time, cheapest first, each capped at one hour (timeout 3600).
# Fit times land in benchmarks/out/peers_issue32_fit.jsonl; a run that does not finish gets a line
# with "status": "timeout" (rc 124) or the failing rc.
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
OUT=benchmarks/out/peers_issue32_fit.jsonl
LOG=benchmarks/out/peers_issue32.log
for spec in "mst adult 1" "mst adult 10" "aim adult 1" "aim adult 10" "mst census 1" "mst census 10" "aim census 1" "aim census 10"; do
  set -- $spec
  echo "$(date -u +%FT%TZ) start $spec" >> $LOG
  t0=$(date +%s)
  timeout 3600 .venv-peers/bin/python benchmarks/peers/run_smartnoise.py benchmarks/out/splits/$2_s0 \
      --method $1 --epsilon $3 --delta 1e-5 --bins 32 --out $OUT >> $LOG 2>&1
  rc=$?
  echo "$(date -u +%FT%TZ) end $spec rc=$rc wall=$(( $(date +%s) - t0 ))s" >> $LOG
  if [ $rc -ne 0 ]; then
    echo "{\"folder\": \"benchmarks/out/splits/$2_s0\", \"method\": \"$1\", \"epsilon\": $3, \"delta\": 1e-05, \"status\": \"$([ $rc -eq 124 ] && echo timeout || echo failed)\", \"rc\": $rc, \"wall_s\": $(( $(date +%s) - t0 ))}" >> $OUT
  fi
done
