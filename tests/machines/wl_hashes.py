#!/usr/bin/env python3
# A python3 workload for the cross-machine tests, following tests/workloads/wl_common.h's protocol
# (argv[1] is WORKDIR; WORKDIR/ready, then wait for WORKDIR/go; one line PASS or FAIL: ...).
# Its state is a chain of SHA-256 and BLAKE2 digests (OpenSSL's libcrypto, which picks its code by
# the CPU at start-up: on a CPU without what it picked, SIGILL) built before the checkpoint and
# continued after it; the result must equal the same chain computed in one go. Its monotonic
# clock must not go back across the move (time.sleep waits until a monotonic deadline: on a
# machine whose clock is days behind, it would sleep for days).
import hashlib
import os
import sys
import time


def chain(seed, rounds):
    for i in range(rounds):
        seed = hashlib.sha256(seed + i.to_bytes(4, "little")).digest()
        seed = hashlib.blake2b(seed).digest()[:32]
    return seed


work = sys.argv[1]
state = chain(b"cairn", 2000)
before = time.monotonic()
with open(os.path.join(work, "ready.tmp"), "w") as f:
    f.write(f"{os.getpid()}\n")
os.rename(os.path.join(work, "ready.tmp"), os.path.join(work, "ready"))
waited = 0
while not os.path.exists(os.path.join(work, "go")):
    time.sleep(0.01)
    waited += 1
    if waited > 60000:
        print("FAIL: no WORKDIR/go", flush=True)
        sys.exit(1)
after = time.monotonic()
if after < before:
    print(f"FAIL: the monotonic clock went back from {before:.3f} to {after:.3f}", flush=True)
    sys.exit(1)
state = chain(state, 2000)
if state != chain(chain(b"cairn", 2000), 2000):
    print("FAIL: the digest chain differs from an uninterrupted one", flush=True)
    sys.exit(1)
print("PASS", flush=True)
