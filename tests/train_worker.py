"""Worker of tests/test_train.py: train a run from a YAML config, or evaluate a run folder, under `python` or `torchrun`.

python tests/train_worker.py train CONFIG.yaml [--toy] [--kill-after-epoch N]
python tests/train_worker.py eval RUN_DIR --out metrics.json [--toy]
python tests/train_worker.py grads CONFIG.yaml --out grads.pt   # one optimiser step without dropout: its loss terms and gradients
"""
import argparse, json, os, signal
import torch
torch.set_num_threads(1)          # the same arithmetic in every process and every test
from tpas_nb.train import train, close_process_group
import tpas_nb.training.trainer as trainer_module
from tpas_nb.training.trainer import Trainer
from tpas_nb.runs import resolve_data_root
from tpas_nb.eval.benchmark import evaluate_run
from toy_method import ToyMethod
from tpas_nb.config import load_config
from tpas_nb.data.pab import PABFolder, pab_tokenizer


def toy(config):
    "The trainer's stand-in method, with the same initial weights in every process."
    tok = pab_tokenizer(PABFolder(resolve_data_root(config.data, progress=False)))
    torch.manual_seed(config.seed)
    return ToyMethod(len(tok))


def first_step_grads(config, out):
    "The trainer's first optimiser step of `config.method` in eval mode: rank 0 saves the loss terms (mean over processes) and the gradients (after DDP)."
    t = Trainer.from_config(config, progress=False)
    net = t.model
    net.eval(); net.train = lambda mode=True: net          # no dropout, drop-path or batch statistics: a process's features depend on its inputs alone
    step, saved = t.optimizer.step, {}
    def capture(*a, **k):                                   # the gradients AdamW is about to use
        saved.update({n: p.grad.detach().clone() for n, p in net.named_parameters() if p.grad is not None})
        return step(*a, **k)
    t.optimizer.step = capture
    t.fit()
    if t.setup.main: torch.save(dict(losses=t.losses, grads=saved, processes=t.setup.W, gather=getattr(net, 'gather_processes', None)), out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('mode', choices=['train', 'eval', 'grads'])
    ap.add_argument('path', help='config YAML (train) or run folder (eval)')
    ap.add_argument('--toy', action='store_true', help='use tests/toy_method.ToyMethod instead of config.method')
    ap.add_argument('--kill-after-epoch', type=int, default=0, help='SIGKILL this process right after that epoch is checkpointed')
    ap.add_argument('--out', default='', help='eval: where rank 0 writes the metrics; grads: the .pt file')
    a = ap.parse_args()
    if a.mode == 'train':
        config = load_config(a.path)
        if a.kill_after_epoch:
            save_state = trainer_module.save_state
            def save_then_die(path, state):
                save_state(path, state)
                if state['epoch'] >= a.kill_after_epoch and state['micro'] == 0: os.kill(os.getpid(), signal.SIGKILL)
            trainer_module.save_state = save_then_die      # the name CheckpointCB calls
        train(config, progress=False, method=toy(config) if a.toy else None)
        close_process_group()
    elif a.mode == 'grads':
        first_step_grads(load_config(a.path), a.out)
        close_process_group()
    else:
        from accelerate import Accelerator
        config = load_config(os.path.join(a.path, 'config.yaml'))
        acc = Accelerator(cpu=True) if int(os.environ.get('WORLD_SIZE', '1')) > 1 else None
        res = evaluate_run(a.path, splits=('test', 'ucc', 'val'), method=toy(config) if a.toy else None, accelerator=acc)
        if acc is None or acc.is_main_process:
            with open(a.out, 'w') as f: json.dump(dict(res, world_size=acc.num_processes if acc else 1), f)
        close_process_group()


if __name__ == '__main__':
    main()
