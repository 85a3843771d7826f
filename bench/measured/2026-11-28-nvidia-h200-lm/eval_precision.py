"""What the modded reference's predictor costs, and how close a prefix's answer stays to the whole window's,
in float32 with TF32 matmuls off (the reference as it is) and on (llm.c's eval): the look-ahead audit holds
them within the task's agree_tolerance, 0.001 nats. The network at full size with random weights (the head and
the output projections drawn at std 0.02, not zero, so that the distributions are not uniform), random windows.
`python3 eval_precision.py [windows] [audits]` from the checkout's root; on a CPU a tiny network. (Run on the
H200 with one-line statements joined by semicolons; split here for the linter, the same statements.)"""
import sys
import time

import torch

sys.path.insert(0, ".")
from bench.gpu_common import load_reference_module  # noqa: E402

m = load_reference_module("fineweb-gpt2-modded-pytorch")
cuda = torch.cuda.is_available()
dev = torch.device("cuda" if cuda else "cpu")
W, K = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else ((640, 512) if cuda else (4, 8))
T = 1024 if cuda else 64
torch.manual_seed(0)
net = (m.GPT(50304, 12, 6, 768) if cuda else m.GPT(50304, 2, 2, 32)).to(dev).eval()
with torch.no_grad():
    for mod in net.modules():
        if isinstance(mod, m.CastedLinear) and not mod.weight.abs().sum():
            mod.weight.normal_(0, 0.02)
windows = torch.randint(0, 50257, (W, T + 1), device=dev)
g = torch.Generator().manual_seed(1)
rows = torch.randint(0, W, (K,), generator=g)
lengths = torch.randint(1, T + 1, (K,), generator=g)


def sync():
    if cuda:
        torch.cuda.synchronize()


@torch.inference_mode()
def first_pass(batch=16):
    out = []
    for i in range(0, W, batch):
        x = windows[i:i + batch]
        out.append(m.log_distribution(net, x[:, :-1]).gather(-1, x[:, 1:, None])[..., 0].cpu())
    return torch.cat(out)


@torch.inference_mode()
def audit():
    out = torch.empty(K)
    for j, (r, n) in enumerate(zip(rows.tolist(), lengths.tolist())):
        d = m.log_distribution(net, windows[r:r + 1, :n], last_only=True)[0, -1]
        out[j] = d[windows[r, n]].cpu()
    return out


for tf32 in (False, True):
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    first_pass()                                # warm: the allocator, cuBLAS's plans
    sync()
    t = time.perf_counter()
    first = first_pass()
    sync()
    first_s = time.perf_counter() - t
    t = time.perf_counter()
    fresh = audit()
    sync()
    audit_s = time.perf_counter() - t
    diff = (fresh - first[rows, lengths - 1]).abs()
    tag = "tf32" if tf32 else "fp32"
    print(f"eval_{tag}_first_pass_s_per_1k_windows={first_s / W * 1000:.3f}")
    print(f"eval_{tag}_task_first_pass_s={first_s / W * 10240:.2f}  (10,240 windows, extrapolated from {W})")
    print(f"eval_{tag}_audit_s_per_position_ms={audit_s / K * 1000:.3f}")
    print(f"eval_{tag}_task_audit_s={audit_s / K * 2304:.2f}  (2,304 positions, extrapolated from {K})")
    print(f"eval_{tag}_audit_max_diff_nats={diff.max().item():.6f}  median {diff.median().item():.6f} "
          f"over {K} positions (task tolerance 0.001)")
