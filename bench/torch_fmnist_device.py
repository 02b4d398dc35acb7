# The reference recipe of ../shared/reference/torch_qat_fmnist.py (same MLP / CNN, eager-mode QAT
# with the fbgemm default qconfig, SGD(0.05, 0.9), batch 64, constant rate) on a chosen device,
# for bench/train_vs_pytorch.sh's CUDA mode. The data set is moved to the device once; an epoch's
# time ends with a device synchronisation.
# usage: torch_fmnist_device.py {mlp|cnn} {fp32|qat} EPOCHS DEVICE [DATA_DIR]
import gzip, sys, time
import numpy as np
import torch
import torch.nn as nn
import torch.ao.quantization as tq

arch, mode, epochs, device = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
data = (sys.argv[5] if len(sys.argv) > 5 else "/usr/share/datasets/fashion-mnist").rstrip("/") + "/"


def idx(name, off):
    with gzip.open(data + name) as f:
        return np.frombuffer(f.read(), np.uint8, offset=off)


def images(name):
    x = idx(name, 16).reshape(-1, 1, 28, 28)
    return (torch.tensor(x, dtype=torch.float32) / 255.).to(device)


Xtr, Xte = images("train-images-idx3-ubyte.gz"), images("t10k-images-idx3-ubyte.gz")
Ytr = torch.tensor(idx("train-labels-idx1-ubyte.gz", 8), dtype=torch.long).to(device)
Yte = torch.tensor(idx("t10k-labels-idx1-ubyte.gz", 8), dtype=torch.long).to(device)
torch.manual_seed(0)


class MLP(nn.Module):
    def __init__(s):
        super().__init__(); s.q = tq.QuantStub(); s.dq = tq.DeQuantStub()
        s.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                              nn.Linear(128, 10))

    def forward(s, x): return s.dq(s.net(s.q(x)))


class CNN(nn.Module):
    def __init__(s):
        super().__init__(); s.q = tq.QuantStub(); s.dq = tq.DeQuantStub()
        s.net = nn.Sequential(nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(32 * 7 * 7, 10))

    def forward(s, x): return s.dq(s.net(s.q(x)))


m = MLP() if arch == "mlp" else CNN()
if mode == "qat":
    m.qconfig = tq.get_default_qat_qconfig("fbgemm"); m.train(); tq.prepare_qat(m, inplace=True)
m = m.to(device)
opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
lossf = nn.CrossEntropyLoss(); B = 64
sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
t_train = 0
for ep in range(epochs):
    perm = torch.randperm(len(Xtr), device=device); m.train(); sync(); t0 = time.perf_counter()
    for i in range(0, len(Xtr), B):
        idb = perm[i:i + B]; opt.zero_grad(); loss = lossf(m(Xtr[idb]), Ytr[idb]); loss.backward(); opt.step()
    sync(); t_train += time.perf_counter() - t0
    m.eval()
    with torch.no_grad(): acc = (m(Xte).argmax(1) == Yte).float().mean().item()
    print(f"{arch} {mode} {device} epoch {ep+1} train_s {time.perf_counter()-t0:.2f} loss {loss.item():.4f} "
          f"test_acc {acc:.4f}", flush=True)
print(f"{arch} {mode} {device} torch {torch.__version__} train_s_per_epoch {t_train/epochs:.2f}")
