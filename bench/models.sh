# Sourced by the bench/run_* scripts, from the repository root: the benchmark models in
# build/bench-models/. bytegpt is the README's example (copied); the GPTs are written once by
# bench/memory/make_gpt.py with Debian's python and torch, the Llamas by
# bench/memory/make_llama_skeleton.py: llama70b-skeleton (Llama-3-70B's shape on the meta device,
# no values; llama70b-sdpa-skeleton the same calling scaled-dot-product attention), llama-tiny-skeleton and llama-tiny (the same code at 0.1 M parameters, without and
# with values).
#
# bench_model NAME: prints the model's file, making it first when it is missing. Without
# /usr/bin/python3 and torch a GPT cannot be made: one line on stderr and status 1, so that
# callers skip it (`file=$(bench_model "$model") || continue`).
bench_model() {
  local dir=build/bench-models
  local file=$dir/$1.pt
  if [ ! -f "$file" ]; then
    if [ "$1" = bytegpt ]; then
      mkdir -p "$dir" && cp examples/bytegpt.pt "$file" || return 1
    elif /usr/bin/python3 -c 'import torch' 2>/dev/null; then
      local llama=(/usr/bin/python3 bench/memory/make_llama_skeleton.py "$file")
      case "$1" in
        llama70b-skeleton) "${llama[@]}" --preset llama3-70b >&2 || return 1 ;;
        llama70b-sdpa-skeleton)
          "${llama[@]}" --preset llama3-70b --attention sdpa >&2 || return 1 ;;
        llama-tiny-skeleton) "${llama[@]}" --preset tiny >&2 || return 1 ;;
        llama-tiny) "${llama[@]}" --preset tiny --device cpu >&2 || return 1 ;;
        *) /usr/bin/python3 bench/memory/make_gpt.py "$dir" --only "$1" >&2 || return 1 ;;
      esac
    else
      echo "$(basename "$0"): $1 needs /usr/bin/python3 with torch to be made; skipped" >&2
      return 1
    fi
  fi
  echo "$file"
}
