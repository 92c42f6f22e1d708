"""Everyday PyTorch idioms, one small program each, typed as a learner coming from PyTorch would type them
(with `import minigrad as mg` for `import torch`), run without modification. Each program asserts what it
computed, so an idiom that runs but gives a wrong answer fails too. Where minigrad differs from torch on
purpose, the porting table (README, docs/porting.md) says so; those idioms are not here."""
import textwrap

import numpy as np
import pytest

PRELUDE = """
import math
import numpy as np
import minigrad as mg
from minigrad import nn, optim
import minigrad.nn.functional as F
mg.manual_seed(0)
"""

IDIOMS = {
    "tensor-dtypes": """
        assert mg.tensor([1, 2, 3]).dtype == np.int64 and mg.tensor([1.0, 2.0]).dtype == np.float32
        assert mg.arange(5).dtype == np.int64 and mg.arange(0, 1, 0.25).dtype == np.float32
        assert mg.full((2, 2), 7).dtype == np.int64 and mg.zeros_like(mg.arange(3)).dtype == np.int64
        x = mg.arange(6).reshape(2, 3).float()
        assert x.dtype == np.float32 and x.long().dtype == np.int64 and x.numel() == 6 and x.dim() == 2
    """,
    "reduce-keepdim": """
        x = mg.randn(4, 3)
        centred = x - x.mean(dim=1, keepdim=True)
        assert centred.shape == (4, 3) and np.allclose(centred.sum(dim=1).numpy(), 0, atol=1e-6)
        z = (x - x.mean(0)) / x.std(0)
        assert np.allclose(z.std(0).numpy(), 1, atol=1e-5)
    """,
    "normalise-rows": """
        x = mg.randn(5, 8)
        x = x / x.norm(dim=-1, keepdim=True)
        assert np.allclose(x.norm(dim=-1).numpy(), 1, atol=1e-6)
    """,
    "qkv-chunk": """
        B, T, C = 2, 5, 12
        qkv = nn.Linear(C, 3 * C)(mg.randn(B, T, C))
        q, k, v = qkv.chunk(3, dim=-1)
        assert q.shape == k.shape == v.shape == (B, T, C)
        a, b = qkv.split([C, 2 * C], dim=-1)
        assert a.shape == (B, T, C) and b.shape == (B, T, 2 * C)
    """,
    "causal-mask-tril": """
        T = 4
        scores = mg.randn(2, T, T)
        mask = mg.ones(T, T).tril().bool()
        att = F.softmax(scores.masked_fill(~mask, -math.inf), dim=-1)
        assert np.allclose(att.numpy()[:, 0, 1:], 0) and np.allclose(att.sum(-1).numpy(), 1, atol=1e-6)
    """,
    "gather-log-probs": """
        logits = mg.randn(4, 5, requires_grad=True)
        y = mg.tensor([1, 0, 4, 2])
        logp = F.log_softmax(logits, dim=1)
        picked = logp.gather(1, y.unsqueeze(1)).squeeze(1)
        assert np.allclose(-picked.mean().item(), F.cross_entropy(logits, y).item(), atol=1e-6)
        picked.sum().backward()
        assert logits.grad.shape == (4, 5)
    """,
    "accuracy": """
        logits = mg.tensor([[2.0, 0.1], [0.2, 1.0], [3.0, -1.0]])
        y = mg.tensor([0, 1, 1])
        acc = (logits.argmax(dim=1) == y).float().mean().item()
        assert abs(acc - 2 / 3) < 1e-6
        assert (logits > 0).sum().item() == 5
    """,
    "training-loop": """
        x = mg.randn(64, 2)
        y = (x[:, 0] * x[:, 1] > 0).long()
        model = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 2))
        criterion = nn.CrossEntropyLoss()
        optimizer = optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
        first = None
        for epoch in range(60):
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            first = loss.item() if first is None else first
        assert loss.item() < 0.5 * first
        model.eval()
        with mg.no_grad():
            pred = model(x).argmax(dim=1)
        assert not pred.requires_grad and (pred == y).float().mean().item() > 0.8
    """,
    "param-groups-and-schedule": """
        model = nn.ModuleDict({"body": nn.Linear(4, 4), "head": nn.Linear(4, 1)})
        optimizer = optim.Adam([{"params": model["body"].parameters()},
                                {"params": model["head"].parameters(), "lr": 1e-3}], lr=1e-2)
        scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
        for step in range(4):
            optimizer.zero_grad()
            model["head"](model["body"](mg.randn(3, 4))).pow(2).mean().backward()
            optimizer.step()
            scheduler.step()
        assert scheduler.get_last_lr() == [2.5e-3, 2.5e-4]
        assert [g["lr"] for g in optimizer.param_groups] == scheduler.get_last_lr()
    """,
    "warmup-lambda": """
        opt = optim.AdamW(nn.Linear(2, 2).parameters(), lr=1e-3)
        warmup = 10
        sched = optim.lr_scheduler.LambdaLR(opt, lr_lambda=lambda s: min(1.0, (s + 1) / warmup))
        lrs = []
        for _ in range(12):
            lrs.append(sched.get_last_lr()[0])
            opt.step()
            sched.step()
        assert abs(lrs[0] - 1e-4) < 1e-12 and abs(lrs[-1] - 1e-3) < 1e-12
    """,
    "one-cycle": """
        opt = optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1, momentum=0.9)
        sched = optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=20)
        lrs = []
        for _ in range(20):
            lrs.append(sched.get_last_lr()[0])
            opt.step()
            sched.step()
        assert abs(lrs[0] - 0.1 / 25) < 1e-12 and abs(max(lrs) - 0.1) < 1e-12 and lrs.index(max(lrs)) == 5
        assert lrs[-1] < 1e-5 and opt.param_groups[0]["momentum"] > 0.9
    """,
    "checkpoint": """
        import os, tempfile
        model = nn.Linear(3, 2)
        opt = optim.Adam(model.parameters(), lr=1e-3)
        model(mg.randn(4, 3)).sum().backward()
        opt.step()
        path = os.path.join(tempfile.mkdtemp(), "checkpoint.npz")
        mg.save({"epoch": 3, "model": model.state_dict(), "optimizer": opt.state_dict(), "loss": 0.25}, path)
        ckpt = mg.load(path)
        model2, opt2 = nn.Linear(3, 2), None
        model2.load_state_dict(ckpt["model"])
        opt2 = optim.Adam(model2.parameters(), lr=1e-3)
        opt2.load_state_dict(ckpt["optimizer"])
        assert ckpt["epoch"] == 3 and ckpt["loss"] == 0.25
        assert np.array_equal(model2.weight.numpy(), model.weight.numpy())
        assert opt2.state_dict()["state"][0]["step"] == 1
    """,
    "freeze-and-count": """
        model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 3))
        n = sum(p.numel() for p in model.parameters() if p.requires_grad)
        assert n == 10 * 4 + 4 * 3 + 3
        for p in model[0].parameters():
            p.requires_grad = False
        model[1].requires_grad_(False)
        assert sum(p.numel() for p in model.parameters() if p.requires_grad) == 0
    """,
    "init-apply": """
        def init_weights(m):
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        model.apply(init_weights)
        assert all(np.all(m.bias.numpy() == 0) for m in model.modules() if isinstance(m, nn.Linear))
        assert [name for name, _ in model.named_modules()] == ["", "0", "1", "2"]
        assert len(list(model.children())) == 3
    """,
    "modulelist-layers": """
        layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(4)])
        x = mg.randn(2, 4)
        for layer in layers[:2]:
            x = layer(x).relu()
        assert isinstance(layers[1:], nn.ModuleList) and len(layers[1:]) == 3
        assert x.shape == (2, 4)
    """,
    "padding-embedding": """
        emb = nn.Embedding(20, 8, padding_idx=0)
        tokens = mg.tensor([[5, 3, 0, 0], [7, 1, 2, 0]])
        out = emb(tokens)
        assert np.all(out.numpy()[0, 2:] == 0)
        out.sum().backward()
        assert np.all(emb.weight.grad[0] == 0)
    """,
    "sequence-loss-ignore-index": """
        B, T, V = 2, 5, 11
        logits = mg.randn(B, T, V, requires_grad=True)
        targets = mg.tensor([[1, 2, 3, -100, -100], [4, 5, -100, -100, -100]])
        loss = F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-100, label_smoothing=0.1)
        loss.backward()
        assert np.all(logits.grad[0, 3:] == 0) and math.isfinite(loss.item())
    """,
    "class-weights-and-bce": """
        w = mg.tensor([1.0, 2.0, 0.5])
        loss = nn.CrossEntropyLoss(weight=w)(mg.randn(6, 3), mg.tensor([0, 1, 2, 1, 0, 2]))
        assert loss.item() > 0
        crit = nn.BCEWithLogitsLoss(pos_weight=mg.tensor([3.0]))
        logits = mg.randn(8, 1, requires_grad=True)
        crit(logits, (mg.rand(8, 1) > 0.5).float()).backward()
        assert logits.grad.shape == (8, 1)
        p = mg.rand(4).clamp(0.01, 0.99)
        assert nn.BCELoss()(p, mg.ones(4)).item() > 0
    """,
    "regression-losses": """
        pred, target = mg.randn(10, requires_grad=True), mg.randn(10)
        total = nn.MSELoss()(pred, target) + nn.L1Loss()(pred, target) + nn.SmoothL1Loss(beta=0.5)(pred, target) \\
            + nn.HuberLoss(delta=2.0)(pred, target)
        total.backward()
        assert pred.grad is not None and pred.grad.shape == (10,)
    """,
    "distillation-kl": """
        student, teacher = mg.randn(4, 6, requires_grad=True), mg.randn(4, 6)
        T = 2.0
        kd = F.kl_div(F.log_softmax(student / T, dim=-1), F.softmax(teacher / T, dim=-1), reduction="batchmean")
        kd.backward()
        assert kd.item() >= 0 and student.grad is not None
        assert abs(nn.KLDivLoss(reduction="batchmean")(F.log_softmax(teacher, -1), F.softmax(teacher, -1)).item()) < 1e-6
    """,
    "clip-and-zero-grad": """
        model = nn.Linear(3, 3)
        opt = optim.RMSprop(model.parameters(), lr=1e-2)
        (model(mg.randn(5, 3)) * 100).sum().backward()
        optim.clip_grad_norm_(model.parameters(), max_norm=1.0)
        total = math.sqrt(sum(float((p.grad ** 2).sum()) for p in model.parameters()))
        assert total <= 1.0 + 1e-5
        opt.step()
        opt.zero_grad(set_to_none=True)
        assert all(p.grad is None for p in model.parameters())
    """,
    "elementwise-math": """
        x = mg.linspace(-2, 2, 9)
        assert np.allclose(x.clamp(min=0).numpy(), np.maximum(x.numpy(), 0))
        assert np.allclose((x.sin() ** 2 + x.cos() ** 2).numpy(), 1, atol=1e-6)
        assert np.allclose(x.abs().log1p().expm1().numpy(), np.abs(x.numpy()), atol=1e-6)
        assert np.array_equal(x.sign().numpy(), np.sign(x.numpy())) and x.round().dtype == x.dtype
        assert np.allclose(mg.maximum(x, mg.zeros_like(x)).numpy(), x.relu().numpy())
        assert mg.tensor([1.0, 2.0, 3.0]).prod().item() == 6.0
    """,
    "positions-and-shapes": """
        B, T = 3, 5
        pos = mg.arange(T).unsqueeze(0).expand(B, T)
        assert pos.shape == (B, T) and pos[2, 4].item() == 4
        x = mg.randn(B, T, 4)
        assert x.view(B, -1).shape == (B, T * 4) and x.permute(0, 2, 1).shape == (B, 4, T)
        assert mg.cat([x, x], dim=1).shape == (B, 2 * T, 4) and mg.stack([x, x]).shape == (2, B, T, 4)
        assert x.flip(1)[:, 0].numpy().tolist() == x[:, -1].numpy().tolist()
        assert x.roll(1, dims=1)[:, 1].numpy().tolist() == x[:, 0].numpy().tolist()
        assert x.repeat(1, 2, 1).shape == (B, 2 * T, 4) and x.contiguous() is x
    """,
    "outer-eye-cumsum": """
        a, b = mg.arange(3).float(), mg.arange(4).float()
        assert a.outer(b).shape == (3, 4) and mg.outer(a, b)[2, 3].item() == 6.0
        assert np.array_equal(mg.eye(3).numpy(), np.eye(3))
        assert mg.arange(1, 5).cumsum(dim=0).tolist() == [1, 3, 6, 10]
        mask = mg.tensor([[True, False], [False, True]])
        rows, cols = mg.where(mask)
        assert rows.tolist() == [0, 1] and cols.tolist() == [0, 1]
        assert mg.eye(2).masked_select(mask).tolist() == [1.0, 1.0]
    """,
    "double-precision": """
        model = nn.Linear(2, 2).double()
        x = mg.randn(3, 2).double()
        assert model(x).dtype == np.float64 and x.to(np.float32).dtype == np.float32
        assert model.float().weight.dtype == np.float32
    """,
    "other-optimizers": """
        for make in [lambda ps: optim.Adagrad(ps, lr=0.1), lambda ps: optim.RMSprop(ps, lr=0.01, momentum=0.9),
                     lambda ps: optim.Adam(ps, lr=0.01, amsgrad=True)]:
            w = mg.tensor([3.0, -2.0], requires_grad=True)
            opt = make([w])
            for _ in range(50):
                opt.zero_grad()
                (w ** 2).sum().backward()
                opt.step()
            assert (w ** 2).sum().item() < 13.0
    """,
    "inspect-a-model": """
        model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
        shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
        assert shapes == {"0.weight": (4, 3), "0.bias": (4,), "1.weight": (4,), "1.bias": (4,)}
        assert list(model.state_dict().keys()) == list(shapes)
        x = mg.randn(2, 3)
        assert model(x).detach().numpy().shape == (2, 4) and isinstance(model(x).tolist(), list)
    """,
}


@pytest.mark.parametrize("name", list(IDIOMS))
def test_idiom_runs_unmodified(name):
    exec(compile(PRELUDE + textwrap.dedent(IDIOMS[name]), f"<idiom {name}>", "exec"), {})


def test_the_table_is_a_real_table():
    assert len(IDIOMS) >= 25 and all("assert" in code for code in IDIOMS.values())
