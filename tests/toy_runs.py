"""The tiny SynthPAB folders and run folders that several end-to-end test modules build: one place for the sizes, the
one-thread rule (two pytest processes may share the 2 cores) and the two ways a run folder is made (written by hand
from freshly initialised, seeded weights; or trained for a few steps by `train`)."""
import contextlib
from pathlib import Path

import torch

from tpas_nb.config import RunConfig, DataConfig, OptimConfig, save_config


@contextlib.contextmanager
def one_thread():
    "torch on one thread inside the block, the previous count restored after it."
    threads = torch.get_num_threads(); torch.set_num_threads(1)
    try: yield
    finally: torch.set_num_threads(threads)


def tiny_synthpab(root: Path, train_pairs: int = 4, val_pairs: int = 1, test_pairs: int = 4, weather: bool = False) -> Path:
    "A SynthPAB of 48-px images with no ucc or held-out split, written with one worker."
    from tpas_nb.data.synth.corpus import make_synthpab
    return make_synthpab(root, train_pairs=train_pairs, val_pairs=val_pairs, test_pairs=test_pairs, ucc_pairs=0, heldout_pairs=0,
                         image_size=48, weather=weather, progress=False, workers=1)


def untrained_run(out: Path, method: str, sp: Path, k_test: int = 4, eval_batch: int = 8) -> Path:
    "A run folder written by hand: config.yaml and the freshly initialised weights of `method` (seed 0) as best.safetensors."
    from tpas_nb.data.pab import PABFolder, pab_tokenizer
    from tpas_nb.runs import build_run_method, save_weights
    config = RunConfig(method=method, data=DataConfig(root=str(sp)), k_test=k_test, eval_batch=eval_batch, device='cpu', out_dir=str(out))
    torch.manual_seed(0)
    m = build_run_method(config, pab_tokenizer(PABFolder(sp)))
    save_config(config, out / 'config.yaml'); save_weights(m, out / 'best.safetensors', step=0)
    return out


def trained_run(out: Path, method: str, sp: Path, lr: float = 1e-3, steps: int = 2, **fields) -> Path:
    "A run folder that `train` wrote after `steps` optimiser steps at batch 8 (no final evaluation); `fields` are RunConfig fields."
    from tpas_nb.train import train
    cfg = RunConfig(method=method, data=DataConfig(root=str(sp)), epochs=1, batch_size=8, max_steps=steps, k_test=4, eval_batch=8,
                    out_dir=str(out), device='cpu', optim=OptimConfig(lr=lr, lr_min=lr / 10, warmup_steps=1), **fields)
    with one_thread(): return train(cfg, progress=False, final_splits=())
