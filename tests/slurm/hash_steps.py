# A batch job's computation for the SLURM tests: STEPS steps of a SHA-256 chain, each a fixed
# amount of work. It prints "step I T" (I the step, T the wall time) after each step, and at the
# end "digest HEX", the same whether or not the job was stopped, checkpointed and restored on the
# way; a job restarted from zero prints step 1 again. Usage: python3 hash_steps.py STEPS PER_STEP
import hashlib, sys, time

steps, per_step = int(sys.argv[1]), int(sys.argv[2])
h = hashlib.sha256(b"cairn-slurm").digest()
for i in range(1, steps + 1):
    for _ in range(per_step):
        h = hashlib.sha256(h).digest()
    print("step %d %.3f" % (i, time.time()), flush=True)
print("digest %s" % h.hex(), flush=True)
