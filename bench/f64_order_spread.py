"""How far apart two float64 forwards of a module are when they sum in other orders: a proxy,
on the CPU, for cuda-f64 against cpu-f64 (python/tests/test_module_ref_f64.py asks for
1e-12 in the verifier's form). torch's CPU float64 forward of tests/modules/conv_gn_shrink.py
against a hand-written one (the convolution summed in reversed order, the group norm's mean
backwards, a two-pass variance), on uniform, normal, offset (256 +- 1) and large-magnitude
(|x| in [5e3, 1e4]) inputs. Run from the repository root: python3 bench/f64_order_spread.py"""
import sys, numpy as np, torch, torch.nn.functional as F
sys.path.insert(0, "tests/modules"); import conv_gn_shrink as M
torch.manual_seed(0)
m = M.Model(*M.get_init_inputs()).double().eval()
rng = np.random.default_rng(1)
def sets():
    sh = (2, 3, 10, 10)
    yield "uniform", rng.uniform(-1, 1, sh)
    yield "normal", rng.standard_normal(sh)
    yield "offset", 256 + rng.uniform(-1, 1, sh)
    s = rng.choice([-1, 1], sh); yield "large", s * rng.uniform(5e3, 1e4, sh)
def alt(x):
    w = m.conv.weight.detach().numpy(); b = m.conv.bias.detach().numpy()
    N, C, H, W = x.shape; O, _, K, _ = w.shape
    y = np.zeros((N, O, H - K + 1, W - K + 1))
    for c in reversed(range(C)):
        for i in reversed(range(K)):
            for j in reversed(range(K)):
                y += w[None, :, c, i, j, None, None] * x[:, None, c, i:i + H - K + 1, j:j + W - K + 1]
    y += b[None, :, None, None]
    G = m.gn.num_groups; g = y.reshape(N, G, -1)
    mu = g[:, :, ::-1].sum(-1, keepdims=True) / g.shape[-1]
    var = ((g - mu) ** 2).sum(-1, keepdims=True) / g.shape[-1]
    z = ((g - mu) / np.sqrt(var + m.gn.eps)).reshape(y.shape)
    z = z * m.gn.weight.detach().numpy()[None, :, None, None] + m.gn.bias.detach().numpy()[None, :, None, None]
    return F.softshrink(torch.from_numpy(z), 0.5).numpy()
for name, x in sets():
    a = m(torch.from_numpy(x)).detach().numpy().ravel(); b = alt(x).ravel()
    scale = max(1.0, float(np.sqrt(np.mean(a * a))))
    r = np.abs(a - b) / (scale + np.abs(a))
    print(f"conv_gn_shrink {name:8s} max|a-b| {np.abs(a-b).max():.3g}  max rel (verifier form) {r.max():.3g}  NMSE {np.sum((a-b)**2)/np.sum(a*a):.3g}")
