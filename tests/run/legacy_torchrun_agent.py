"""Stands in for the agent of a torchrun from torch 2.0 or earlier (whose torchrun does not start
on Python 3.11, as Debian's 1.13 shows): hosts that torch's own c10d TCPStore, starts the given
command as 2 ranks with the variables such an agent gives its workers for static rendezvous,
and, after they exit, checks that the store still serves. Run by tests/run/launchers_test.cpp
with MFSDP_TORCH_LEGACY_PYTHON, a Python whose torch is 2.0 or earlier."""
import datetime
import os
import subprocess
import sys

import torch
import torch.distributed as dist

store = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=datetime.timedelta(seconds=60))
ranks = []
for rank in range(2):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port),
               RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
               GROUP_RANK="0", TORCHELASTIC_USE_AGENT_STORE="True",
               TORCHELASTIC_RUN_ID="none", TORCHELASTIC_RESTART_COUNT="0",
               TORCHELASTIC_MAX_RESTARTS="0")
    ranks.append(subprocess.Popen(sys.argv[1:], env=env))
codes = [r.wait() for r in ranks]
store.set("legacy_agent/after", "served")
print(f"legacy agent: torch {torch.__version__}, ranks exited {codes}, store after them: "
      f"{store.get('legacy_agent/after').decode()}", flush=True)
sys.exit(max(codes))
