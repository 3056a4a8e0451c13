#!/usr/bin/env bash
# Every GPU-truth bench (issue 22) in one call of a lent GPU machine, each under its own cap so one hang or
# crash costs only its own figures. Run from the repo root with OUT set to the folder that comes back:
#     OUT=/tmp/gpu bash bench/gpu_run.sh
# The machine's python3 has torch (CUDA) but no pydantic: wheels carried in .whl are installed to /tmp/site.
set -u
OUT=${OUT:?set OUT to the results folder}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=src:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
python3 -c "import torch, pydantic; print('torch', torch.__version__, torch.cuda.get_device_name(), 'pydantic', pydantic.VERSION)" || exit 1
run() {  # name cap_s command...
  local name=$1 cap=$2; shift 2
  echo "=== $name (cap ${cap}s)"; local t0=$SECONDS
  timeout -k 5 "$cap" "$@" >"$OUT/$name.log" 2>&1; local rc=$?
  tail -n 25 "$OUT/$name.log"; echo "=== $name rc=$rc in $((SECONDS - t0))s"
}
memory() {  # a configuration that kills the CUDA context ends its process: a fresh one resumes after it
  python3 bench/gpu_memory.py measure --device cuda --budget-s "${MEM_BUDGET:-100}" --out "$OUT"
  for _ in 1 2 3; do
    [ $? -eq 0 ] && return 0
    python3 bench/gpu_memory.py measure --device cuda --budget-s "${MEM_BUDGET:-100}" --out "$OUT" --resume
  done
}
export -f memory
export OUT
for b in ${GPU_BENCHES:-memory estimate mfu}; do
  case $b in
    memory) run gpu_memory "${MEM_CAP:-130}" bash -c memory ;;
    estimate) run gpu_estimate "${EST_CAP:-200}" python3 bench/gpu_estimate.py --device cuda --budget-s "${EST_BUDGET:-175}" --out "$OUT" ;;
    mfu) run gpu_mfu "${MFU_CAP:-120}" python3 bench/gpu_mfu.py --device cuda --budget-s "${MFU_BUDGET:-100}" --out "$OUT" ;;
  esac
done
ls -la "$OUT"
