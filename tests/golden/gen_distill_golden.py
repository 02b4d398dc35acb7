"""Golden vectors for kl_div_softmax and distillation_loss (tests/framework/test_ops_distill.cpp).

    /usr/bin/python3 tests/golden/gen_distill_golden.py   # writes tests/golden/distill.txt

kl  = F.kl_div(F.log_softmax(s / T, 1), F.softmax(t / T, 1), reduction="batchmean")
kd  = (1 - w) F.cross_entropy(s, y) + w T^2 kl           (Hinton et al. 2015)
Every case is float64; grad_s / grad_t are d kl / d s and d kl / d t (both require grad),
grad_kd_s is d kd / d s with the teacher held fixed.
"""
import os

import torch
import torch.nn.functional as F

from golden_format import GoldenWriter

torch.manual_seed(20240614)
torch.set_default_dtype(torch.float64)
HERE = os.path.dirname(os.path.abspath(__file__))
w = GoldenWriter(os.path.join(HERE, "distill.txt"), __doc__)


def case(name, n, c, temperature, weight, spread=3.0):
    s = (torch.randn(n, c) * spread).requires_grad_()
    t = (torch.randn(n, c) * spread).requires_grad_()
    y = torch.randint(0, c, (n,))
    kl = F.kl_div(F.log_softmax(s / temperature, 1), F.softmax(t / temperature, 1),
                  reduction="batchmean")
    kl.backward()
    s2 = s.detach().clone().requires_grad_()
    kd = (1 - weight) * F.cross_entropy(s2, y) + weight * temperature ** 2 * F.kl_div(
        F.log_softmax(s2 / temperature, 1), F.softmax(t.detach() / temperature, 1),
        reduction="batchmean")
    kd.backward()
    w.case(name)
    w.scalar("temperature", temperature)
    w.scalar("weight", weight)
    w.tensor("s", s)
    w.tensor("t", t)
    w.tensor("y", y)
    w.scalar("kl", kl)
    w.tensor("grad_s", s.grad)
    w.tensor("grad_t", t.grad)
    w.scalar("kd", kd)
    w.tensor("grad_kd_s", s2.grad)
    w.end()


case("t1_w05", 4, 5, 1.0, 0.5)
case("t4_w09", 8, 10, 4.0, 0.9)
case("t02_w0", 3, 7, 0.2, 0.0)  # sharp distributions: tiny probabilities
case("t20_w1", 5, 10, 20.0, 1.0, spread=10.0)
w.close()
