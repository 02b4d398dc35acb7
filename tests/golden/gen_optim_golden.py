"""Golden vectors for framework/optim: torch.optim updates and lr schedules (PyTorch 1.13).

Each optimizer case starts two float32 parameters "p0" (3, 4) and "p1" (5) from fixed values
and applies 5 fixed gradients; "p1" has no gradient at step 2 (skipped, as PyTorch does).
Keys: start{j}, grad{k}_{j} (absent when skipped), after{k}_{j} for step k = 0..4.
Schedule cases hold "lr": the lr after construction and after each of the epochs' step().

Run: /usr/bin/python3 tests/golden/gen_optim_golden.py
"""
import os

import torch

from golden_format import GoldenWriter

STEPS = 5
SKIP = (2, 1)  # (step, param) without a gradient

OPTIMIZERS = [
    ("sgd_plain", torch.optim.SGD, dict(lr=0.1)),
    ("sgd_momentum", torch.optim.SGD, dict(lr=0.05, momentum=0.9)),
    ("sgd_nesterov", torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True)),
    ("sgd_weight_decay", torch.optim.SGD, dict(lr=0.1, momentum=0.5, weight_decay=0.01)),
    ("sgd_dampening", torch.optim.SGD, dict(lr=0.1, momentum=0.8, dampening=0.3)),
    ("adam", torch.optim.Adam, dict(lr=1e-2)),
    ("adam_weight_decay", torch.optim.Adam, dict(lr=3e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("adam_amsgrad", torch.optim.Adam, dict(lr=1e-2, amsgrad=True)),
    ("adamw", torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.05)),
    ("adamw_amsgrad", torch.optim.AdamW, dict(lr=2e-2, betas=(0.5, 0.9), weight_decay=0.1, amsgrad=True)),
]


def optimizer_case(w, name, cls, kwargs):
    g = torch.Generator().manual_seed(1234)
    params = [torch.randn(3, 4, generator=g), torch.randn(5, generator=g)]
    params = [p.requires_grad_() for p in params]
    opt = cls(params, foreach=False, **kwargs)
    w.case(name)
    for key, value in kwargs.items():
        if key == "betas":
            w.scalar("beta1", value[0])
            w.scalar("beta2", value[1])
        else:
            w.scalar(key, float(value))
    for j, p in enumerate(params):
        w.tensor("start%d" % j, p)
    for k in range(STEPS):
        opt.zero_grad(set_to_none=True)
        for j, p in enumerate(params):
            if (k, j) == SKIP:
                continue
            # varied magnitudes, a sign flip and an exact zero
            grad = torch.randn(p.shape, generator=g) * (10.0 ** (k - 2))
            grad.view(-1)[0] = 0.0
            p.grad = grad
            w.tensor("grad%d_%d" % (k, j), grad)
        opt.step()
        for j, p in enumerate(params):
            w.tensor("after%d_%d" % (k, j), p)
    w.end()


SCHEDULES = [
    ("step_lr", 0.1, lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5), 12,
     dict(step_size=3, gamma=0.5)),
    ("cosine_lr", 0.1, lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=10, eta_min=1e-3), 25,
     dict(T_max=10, eta_min=1e-3)),
    ("linear_lr", 0.05, lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.25, end_factor=1.0,
                                                                      total_iters=4), 8,
     dict(start_factor=0.25, end_factor=1.0, total_iters=4)),
]


def schedule_case(w, name, lr, make, epochs, args):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=lr)
    sched = make(opt)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(epochs):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    w.case(name)
    w.scalar("base_lr", lr)
    for key, value in args.items():
        w.scalar(key, value)
    w.tensor("lr", torch.tensor(lrs, dtype=torch.float64))
    w.end()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    w = GoldenWriter(os.path.join(here, "optim.txt"), __doc__.split("\n\n")[1])
    for case in OPTIMIZERS:
        optimizer_case(w, *case)
    for case in SCHEDULES:
        schedule_case(w, *case)
    w.close()


if __name__ == "__main__":
    main()
