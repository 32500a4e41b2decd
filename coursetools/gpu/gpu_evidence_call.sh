#!/bin/bash
# One GPU command that runs several parts of coursetools/gpu/gpu_evidence.py at once on the one GPU (an allowance's GPU time
# is short: the parts share the GPU's memory and the machine's 16 cores, and every record says so through
# GPU_EVIDENCE_CONCURRENT; memory peaks are per process, times and free memory are shared).
#
#   usage (on the GPU machine, with .whl carried): BUDGET=280 bash coursetools/gpu/gpu_evidence_call.sh SPEC...
#   (python -m coursetools.gpu.gpu_evidence --plan prints the calls)
#   SPEC: PART (1..4), 5:LESSON[,LESSON] (part 5, grading those lessons), or PART@NODEID[,NODEID] (only those GPU
#   tests of the part, e.g. again after a fix)
#   Where earlier calls brought Transformer Engine's pieces (bash coursetools/gpu/gpu_te.sh receive), it is installed first.
#
# What comes back ($OUT holds at most 8 files): evidence.tgz (every part's records and log, the machine, the GPU's
# memory over time; packed again every 20 s, so a call killed at its limit keeps what was measured), snapshots.tgz
# (lesson 06's allocator snapshot files). Then, here:
# python -m coursetools.gpu.gpu_evidence --merge <files_at>/evidence.tgz <files_at>/snapshots.tgz
set -o pipefail
W=${EVIDENCE_WORK:-/tmp/evidence} # where the parts write; packed into $OUT
mkdir -p "$W"
P="python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade"
$P --break-system-packages .whl/*.whl >"$W/pip.log" 2>&1 ||
  { $P --target /tmp/site .whl/*.whl >>"$W/pip.log" 2>&1 && SITE=:/tmp/site; } ||
  { tail -20 "$W/pip.log"; exit 1; }
mkdir -p /tmp/gpu-evidence-bwrap && dpkg -x .whl/bubblewrap_*.deb /tmp/gpu-evidence-bwrap &&
  export PATH=/tmp/gpu-evidence-bwrap/usr/bin:$PATH
export PYTHONPATH=$PWD$SITE PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 MPLBACKEND=Agg
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} # several parts share 16 cores
BUDGET=${BUDGET:-280}
# Transformer Engine, where this call or earlier ones brought its pieces (coursetools/gpu/gpu_te.sh): installed
# while the other parts start; part 3, which measures it, waits for it (and has that much less budget)
te=""
if [ -f .te/pieces.sha256 ] || [ -f "${TE_STORE:-/tmp/te-pieces}/pieces.sha256" ]; then
  export GPU_EVIDENCE_TE_LOG=$W/te-install.log
  (timeout -k 10 200 bash coursetools/gpu/gpu_te.sh install >"$GPU_EVIDENCE_TE_LOG" 2>&1
    echo "exit $?" >>"$GPU_EVIDENCE_TE_LOG") &
  te=$!
fi
{
  date -u; echo "specs: $*; BUDGET=$BUDGET OMP_NUM_THREADS=$OMP_NUM_THREADS LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldconfig -p | grep -E "libcuda\.so|libnvidia-ml"; nvidia-smi; nproc; free -g; df -h /tmp; tail -3 "$W/pip.log"
} >"$W/machine.txt" 2>&1
pack() {
  tar czf "$OUT/evidence.tmp" -C "$W" --exclude='lesson06_*' . 2>/dev/null && mv "$OUT/evidence.tmp" "$OUT/evidence.tgz"
}
(while sleep 20; do pack; done) </dev/null >/dev/null 2>&1 &
packer=$!
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv -l 5 >"$W/gpu-memory.csv" 2>&1 &
smi=$!
[ $# -gt 1 ] && export GPU_EVIDENCE_CONCURRENT="$* (OMP_NUM_THREADS=$OMP_NUM_THREADS)"
pids=()
t0=$SECONDS
for spec in "$@"; do
  part=${spec%%:*} selection="" tag=p${spec%%:*}
  if [[ $spec == *@* ]]; then
    part=${spec%%@*} list=${spec#*@}
    selection="--tests ${list//,/ }"
    tag=p$part-tests$((${#pids[@]} + 1))
  elif [[ $spec == *:* ]]; then
    list=${spec#*:}
    selection="--lessons ${list//,/ }"
    tag=$tag-$(tr ',' '\n' <<<"$list" | cut -c1-2 | paste -sd-)
  fi
  (
    if [ "$part" = 3 ] && [ -n "$te" ]; then
      until grep -q "^exit " "$GPU_EVIDENCE_TE_LOG" 2>/dev/null; do sleep 2; done
    fi
    left=$((BUDGET - (SECONDS - t0)))
    [ "$left" -ge 1 ] || left=1 # (0 would mean no budget at all)
    timeout -k 10 $((left + 60)) python3 -m coursetools.gpu.gpu_evidence --part "$part" $selection --budget "$left" \
      --out "$W/$tag" >"$W/$tag.log" 2>&1
    echo "exit $?" >>"$W/$tag.log"
  ) &
  pids+=($!)
done
wait "${pids[@]}"
kill $packer $smi 2>/dev/null
ls -lR "$W" >>"$W/machine.txt"
pack
snaps=$(cd "$W" && ls p2/lesson06_* 2>/dev/null)
[ -n "$snaps" ] && tar czf "$OUT/snapshots.tgz" -C "$W" $snaps
ls -l "$OUT"
grep -h "^\[part" "$W"/p*.log | grep -v ": measured" | cut -c1-300
grep -h "^== part\|^exit" "$W"/p*.log
if [ -n "$te" ]; then tail -4 "$GPU_EVIDENCE_TE_LOG"; fi
