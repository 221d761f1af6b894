#!/usr/bin/env bash
# What MCP client configs launch. Works from any cwd and through a symlink.
# Exports each tpu.env value only if that variable is unset (the environment wins), then execs the
# server with the interpreter of the venv that `make setup` made.
set -euo pipefail

src="${BASH_SOURCE[0]}"
while [ -L "$src" ]; do
  dir="$(cd -P "$(dirname "$src")" && pwd)"
  src="$(readlink "$src")"
  case "$src" in /*) ;; *) src="$dir/$src" ;; esac
done
here="$(cd -P "$(dirname "$src")" && pwd)"

env_file="${TPU_DEVOPS_ENV_FILE:-$here/tpu.env}"
exported=""
if [ -f "$env_file" ]; then
  while IFS= read -r line || [ -n "$line" ]; do
    line="${line%$'\r'}"
    case "$line" in ''|'#'*) continue ;; esac
    line="${line#export }"
    key="${line%%=*}"
    [[ "$key" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || continue
    value="${line#*=}"
    # As python-dotenv reads it: one pair of surrounding quotes is stripped; an unquoted value loses
    # an inline " # comment" and surrounding blanks.
    if [[ "$value" =~ ^\"(.*)\"$ ]] || [[ "$value" =~ ^\'(.*)\'$ ]]; then
      value="${BASH_REMATCH[1]}"
    else
      [[ "$value" =~ ^(.*[^[:space:]])?[[:space:]]+#.*$ ]] && value="${BASH_REMATCH[1]}"
      value="${value#"${value%%[![:space:]]*}"}"
      value="${value%"${value##*[![:space:]]}"}"
    fi
    if [ -z "${!key+x}" ]; then export "$key=$value"; exported="$exported $key"; fi
  done < "$env_file"
  # The server reads the same file, and labels the values exported here as tpu.env's, not the environment's.
  export TPU_DEVOPS_ENV_FILE="$env_file" TPU_DEVOPS_FROM_ENV_FILE="${exported# }"
fi

python="$here/.venv/bin/python"
if [ ! -x "$python" ]; then
  echo "tpu-devops: $python not found. Fix: run 'make setup' in $here" >&2
  exit 127
fi
# This checkout's code, whatever else the venv's path holds (a venv shared by several checkouts).
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m tpu_devops.main "$@"
