#!/bin/bash
# Transformer Engine on a remote, offline GPU machine, from the pieces `python -m coursetools.gpu.make_te_wheelhouse` writes to .te/.
# Its wheels are about 280 MiB and a command there carries 64 MiB with the working tree, so they travel in pieces, one
# call each, to a warm machine (`python -m coursetools.gpu.gpu_evidence --plan` prints the calls); the pieces wait in
# $TE_STORE between calls.
#
#   bash coursetools/gpu/gpu_te.sh receive   keep the pieces this call carried, check them, say which of them are there
#   bash coursetools/gpu/gpu_te.sh install   unless an earlier call installed it: receive, then, once every piece is there,
#                                    join them, check the whole, install the wheels (--no-deps) and import
#                                    transformer_engine.pytorch; if the extension built on the CPU machine does not
#                                    import, build transformer_engine_torch here from its sdist with this machine's
#                                    nvcc, and import again
#
# TE_STORE: where the pieces wait (default /tmp/te-pieces); PYTHON: the environment to install into (default python3).
# Exit status: 0 done; 2 pieces missing (install: nothing installed); 1 anything else.
set -o pipefail
STORE=${TE_STORE:-/tmp/te-pieces}
PY=${PYTHON:-python3}
SUMS=pieces.sha256

receive() {
  mkdir -p "$STORE" || return 1
  [ -f .te/$SUMS ] && cp .te/$SUMS "$STORE/"
  [ -f "$STORE/$SUMS" ] || { echo "no .te/$SUMS here: every piece's call carries it"; return 1; }
  for piece in .te/piece-*; do [ -f "$piece" ] && cp "$piece" "$STORE/"; done
  local have=0 total=0 missing=""
  while read -r sum name; do
    [[ $name == piece-* ]] || continue
    total=$((total + 1))
    if [ ! -f "$STORE/$name" ]; then
      missing="$missing $name"
    elif [ "$(sha256sum <"$STORE/$name" | cut -d' ' -f1)" = "$sum" ]; then
      have=$((have + 1))
    else
      echo "$name: checksum differs (a broken transfer?): removed, carry it again"
      rm -f "$STORE/$name"
      missing="$missing $name"
    fi
  done <"$STORE/$SUMS"
  echo "Transformer Engine pieces: $have of $total in $STORE${missing:+; missing:$missing}"
  [ -z "$missing" ] || return 2
}

te_imports() {
  "$PY" -c "
import torch  # first: it loads the CUDA libraries (NCCL, cuDNN) that libtransformer_engine.so needs
import transformer_engine, transformer_engine.pytorch as te
print('transformer_engine', transformer_engine.__version__, 'imports, with torch', torch.__version__)"
}

install() {
  if [ -f "$STORE/installed" ] && te_imports; then # an earlier call installed it
    echo "installed already, by an earlier call"
    return 0
  fi
  receive || return $?
  local whole
  whole=$(awk '$2 == "te.tar" {print $1}' "$STORE/$SUMS")
  (cd "$STORE" && cat $(awk '$2 ~ /^piece-/ {print $2}' $SUMS)) >"$STORE/te.tar" || return 1
  [ "$(sha256sum <"$STORE/te.tar" | cut -d' ' -f1)" = "$whole" ] ||
    { echo "the joined pieces differ from te.tar's checksum"; return 1; }
  rm -rf "$STORE/te" && mkdir "$STORE/te" && tar xf "$STORE/te.tar" -C "$STORE/te" && rm "$STORE/te.tar" || return 1
  local pip=("$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --break-system-packages)
  "${pip[@]}" "$STORE"/te/wheels/*.whl || return 1
  if te_imports; then
    echo "installed: the transformer_engine_torch built on the CPU machine"
    touch "$STORE/installed"
    return 0
  fi
  echo "the transformer_engine_torch built on the CPU machine does not import here: building it from its sdist"
  MAX_JOBS=$(nproc) NVTE_PYTORCH_FORCE_BUILD=TRUE "${pip[@]}" --no-build-isolation \
    "$STORE"/te/build/transformer_engine_torch-*.tar.gz || return 1
  te_imports && echo "installed: transformer_engine_torch built here from its sdist" && touch "$STORE/installed"
}

case $1 in
receive) receive ;;
install) install ;;
*)
  echo "usage: bash coursetools/gpu/gpu_te.sh receive|install" >&2
  exit 1
  ;;
esac
