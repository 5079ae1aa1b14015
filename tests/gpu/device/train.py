# A PyTorch training loop for device_check.sh: a small transformer on random data, fixed seeds,
# deterministic kernels. Prints the final loss exactly (float.hex): a run checkpointed and
# restored must print the same as an uninterrupted one. WORKDIR/progress holds the last step.
#   python3 train.py WORKDIR STEPS STEP_MS DEVICE(cuda|cpu)
import os
import sys
import time

import torch

workdir, steps, step_ms, device = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
if device == "cuda":
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
# On the CPU (device_check.sh's CPU_ONLY run, which checks the script) a much smaller one.
d, layers, batch, seq = (256, 4, 16, 64) if device == "cuda" else (64, 2, 8, 32)
layer = torch.nn.TransformerEncoderLayer(d_model=d, nhead=8, dim_feedforward=4 * d, dropout=0.0, batch_first=True)
encoder = torch.nn.TransformerEncoder(layer, num_layers=layers).to(device)
head = torch.nn.Linear(d, 1000).to(device)
opt = torch.optim.AdamW(list(encoder.parameters()) + list(head.parameters()), lr=1e-3)
data = torch.Generator().manual_seed(1)
progress = os.open(os.path.join(workdir, "progress"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for step in range(steps):
    x = torch.randn(batch, seq, d, generator=data).to(device)
    y = torch.randint(0, 1000, (batch, seq), generator=data).to(device)
    loss = torch.nn.functional.cross_entropy(head(encoder(x)).reshape(-1, 1000), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    value = loss.item()  # waits for the step's kernels
    os.pwrite(progress, b"%10d\n" % (step + 1), 0)
    time.sleep(step_ms / 1000)
print("loss", value.hex(), "steps", steps, flush=True)
