#!/usr/bin/env bash
# Hostile input and careless operation, one case per CTest test: each case
# reproduces the input or the careless operation and checks the behaviour
# docs/reliability.md promises for it. Usage: hostile_test.sh CONVEYOR_BINARY CASE
# The cases live by family in hostile_FAMILY.sh, beside the prelude they share
# (hostile_lib.sh); this script picks the family and sources both.
set -uo pipefail
bin=$(realpath "$1") case=$2
here=$(dirname "$(realpath "${BASH_SOURCE[0]}")")

case $case in
  fifo|memory|empty|skip-list|classes|big-png|workers|toml|subcommands|nul|env|skip-modes|\
  contradictions|integers|config-size)
    family=input ;;
  write-errors|outputs|clobber|atomic-outputs)
    family=outputs ;;
  trace|resident|sigpipe|slow-signal|sweep-signal)
    family=signals ;;
  pack-race|pack-interrupt|make-dataset-interrupt|shard-ranks|extra-shards)
    family=shards ;;
  *)
    echo "unknown case $case"; exit 2 ;;
esac
# shellcheck source-path=SCRIPTDIR
source "$here/hostile_lib.sh"
# shellcheck disable=SC1090
source "$here/hostile_$family.sh"

if [ $failures -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "hostile $case: all checks passed"
