# An inference server for device_check.sh: GIB GiB of random weights (fixed seed) in device memory,
# HTTP on 127.0.0.1:PORT. GET /infer?seed=S runs an input through every layer and answers the
# SHA-256 of the output; a restored server must answer the same. WORKDIR/ready once it listens.
#   python3 serve.py WORKDIR PORT GIB DEVICE(cuda|cpu)
import hashlib
import http.server
import os
import sys
import urllib.parse

import torch

workdir, port, gib, device = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
dtype = torch.float16 if device == "cuda" else torch.float32
n = 8192 if device == "cuda" else 1024
layers = max(1, int(gib * (1 << 30) / (n * n * torch.finfo(dtype).bits // 8)))
gen = torch.Generator(device=device).manual_seed(0)
weights = [torch.randn(n, n, generator=gen, device=device, dtype=dtype) / n**0.5 for _ in range(layers)]
if device == "cuda":
    torch.cuda.synchronize()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        g = torch.Generator(device=device).manual_seed(int(q.get("seed", ["0"])[0]))
        x = torch.randn(1, n, generator=g, device=device, dtype=dtype)
        with torch.no_grad():
            for w in weights:
                x = torch.tanh(x @ w)
        body = (hashlib.sha256(x.float().cpu().numpy().tobytes()).hexdigest() + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = http.server.HTTPServer(("127.0.0.1", port), Handler)
with open(os.path.join(workdir, "ready.tmp"), "w") as f:
    f.write("%d layers of %dx%d\n" % (layers, n, n))
os.rename(os.path.join(workdir, "ready.tmp"), os.path.join(workdir, "ready"))
server.serve_forever()
