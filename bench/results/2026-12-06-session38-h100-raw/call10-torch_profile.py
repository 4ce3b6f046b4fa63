# Session 38: PyTorch's ResNet-50 kernels at batch 4 (TF32, cuDNN autotuner), CUDA graphs inference and eager training.
import sys, torch, torchvision
from torch.profiler import profile, ProfilerActivity
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.backends.cudnn.benchmark = True
m = torchvision.models.resnet50().cuda()
x = torch.randn(4, 3, 224, 224, device="cuda")
labels = torch.randint(0, 1000, (4,), device="cuda")
def table(prof, title):
    print(f"## {title}\n")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=45, max_name_column_width=90))
    sys.stdout.flush()
m.eval()
f = torch.compile(m, mode="reduce-overhead")
with torch.no_grad():
    for _ in range(15):
        torch.compiler.cudagraph_mark_step_begin()
        y = f(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            torch.compiler.cudagraph_mark_step_begin()
            y = f(x)
        torch.cuda.synchronize()
table(prof, "inference, torch.compile(mode='reduce-overhead'), 10 runs")
m.train()
loss_fn = torch.nn.CrossEntropyLoss()
for _ in range(5):
    m.zero_grad(set_to_none=True)
    loss_fn(m(x), labels).backward()
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(10):
        m.zero_grad(set_to_none=True)
        loss_fn(m(x), labels).backward()
    torch.cuda.synchronize()
table(prof, "training (forward, loss, backward), eager, 10 runs")
