#!/usr/bin/env python3
"""A small data-parallel training loop with torch.distributed (gloo over TCP), one rank per process.

Usage: group_train.py RANK WORLD_SIZE PORT STEPS OUT_DIR

Every rank trains the same small model on its own deterministic data; gradients are averaged
with all_reduce each step, so the ranks talk over TCP all the time. Rank 0 hosts the rendezvous
store on 127.0.0.1:PORT. Each rank writes OUT_DIR/progress-RANK (the step it reached) as it goes
and, at the end, OUT_DIR/result-RANK: the final loss and a digest of the weights, both exact
(float.hex), so that an interrupted-and-restored run can be compared bit for bit with an
uninterrupted one.
"""
import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    rank, world, port, steps, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=__import__("datetime").timedelta(seconds=600))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(256, 32, generator=gen)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    loss = None
    for step in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= world
        opt.step()
        if step % 10 == 0:
            with open(os.path.join(out, f"progress-{rank}.tmp"), "w") as f:
                f.write(str(step))
            os.replace(os.path.join(out, f"progress-{rank}.tmp"), os.path.join(out, f"progress-{rank}"))
        time.sleep(0.01)
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
    # Every rank has finished its steps before any reports (and leaves).
    dist.barrier()
    with open(os.path.join(out, f"result-{rank}.tmp"), "w") as f:
        f.write(f"loss {float(loss.item()).hex()} weights {digest}\n")
    os.replace(os.path.join(out, f"result-{rank}.tmp"), os.path.join(out, f"result-{rank}"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
