"""Worker of nbs/12_objectives.ipynb: ITC of features gathered with gradient across two gloo processes (DDP) against one
process on the global batch; `python tests/gather_itc_worker.py one` runs the single process, torchrun the two."""
import json, os, sys, torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from tpas_nb.objectives import gather_with_grad, process_rows, itc_loss
torch.set_num_threads(1)

class SliceOnly(torch.autograd.Function):      # X-VLM's AllGather: backward returns this process's slice, no sum
    @staticmethod
    def forward(ctx, x):
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]; dist.all_gather(parts, x); return torch.cat(parts)
    @staticmethod
    def backward(ctx, g): return process_rows(g)

class Encoders(nn.Module):
    def __init__(self):
        super().__init__()
        self.img, self.txt, self.temp = nn.Linear(6, 4), nn.Linear(5, 4), nn.Parameter(torch.tensor(0.1))
    def forward(self, xi, xt): return self.img(xi), self.txt(xt)

def run(model, xi, xt, ids, gather):
    fi, ft = model(xi, xt)
    loss = itc_loss(gather(fi), gather(ft), gather(ids), model.module.temp if hasattr(model, 'module') else model.temp, 0.2)
    loss.backward()
    net = model.module if hasattr(model, 'module') else model
    return dict(loss=loss.item(), **{k: p.grad.flatten().tolist() for k, p in net.named_parameters()})

torch.set_default_dtype(torch.float64)
torch.manual_seed(0)
net, xi, xt = Encoders(), torch.randn(8, 6), torch.randn(8, 5)
ids = torch.tensor([0, 1, 1, 2, 3, 4, 4, 5])
if len(sys.argv) > 1:                                  # one process, the global batch
    print(json.dumps(run(net, xi, xt, ids, lambda x: x)))
else:
    dist.init_process_group('gloo'); r = dist.get_rank()
    rows = slice(4 * r, 4 * r + 4)
    out = {}
    for name, gather in (('sum', gather_with_grad), ('slice', SliceOnly.apply)):
        model = DDP(Encoders()); model.module.load_state_dict(net.state_dict())
        out[name] = run(model, xi[rows], xt[rows], ids[rows], gather)
    if r == 0: print(json.dumps(out))
    dist.barrier(); dist.destroy_process_group()          # all ranks meet first
    sys.stdout.flush(); os._exit(0)                        # skip interpreter teardown: a gloo rank's threads can abort it ('terminate called without an active exception')
