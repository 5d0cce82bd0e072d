#!/usr/bin/env bash
# The program tests/run/launchers_test.cpp gives `torchrun --max-restarts 1`: runs mfsdp ("$@"),
# except that on torchrun's first attempt rank 1 is killed (SIGKILL) as soon as the checkpoint
# named by FAIL_ONCE_AFTER (a step directory) is complete, as a crashed worker would die.
set -u
if [[ ${RANK:-} != 1 || ${TORCHELASTIC_RESTART_COUNT:-0} != 0 ]]; then
  exec "$@"
fi
"$@" &
worker=$!
until [[ -f $FAIL_ONCE_AFTER/manifest.json ]]; do
  if ! kill -0 "$worker" 2>/dev/null; then
    wait "$worker"
    echo "fail_once_worker: rank 1 ended before $FAIL_ONCE_AFTER was complete; nothing killed" >&2
    exit 3
  fi
  sleep 0.005  # polling a file's appearance: no inotify-tools on the CI machine
done
kill -KILL "$worker"
wait "$worker"
echo "fail_once_worker: killed rank 1 after $FAIL_ONCE_AFTER" >&2
exit 137
