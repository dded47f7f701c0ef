"""The trainer's stand-in method: the smallest object with the Method interface (ITC on pooled patch and word embeddings).
It is deterministic unless dropout > 0, which makes it the reference for the resume and data-parallel tests. Used by
nbs/40_training.ipynb and tests/train_worker.py."""
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn, Tensor

from tpas_nb.objectives import itc_loss


class ToyEmbedding(NamedTuple):
    "feat (N×E, L2-normalised), tokens (N×T×E), mask (N×T)."
    feat: Tensor
    tokens: Tensor
    mask: Tensor

class ToyBackbone(nn.Module):
    "Patch and word embeddings, projections and a learnable temperature."
    def __init__(self, vocab_size: int, img_size: int = 32, embed_dim: int = 16, temp: float = 0.07):
        super().__init__()
        self.img_size = img_size
        self.patch = nn.Conv2d(3, embed_dim, kernel_size=img_size // 4, stride=img_size // 4)
        self.word = nn.Embedding(vocab_size, embed_dim)
        self.norm = nn.LayerNorm(embed_dim)
        self.img_proj, self.txt_proj = nn.Linear(embed_dim, embed_dim), nn.Linear(embed_dim, embed_dim)
        self.temp = nn.Parameter(torch.tensor(float(temp)))

    def temperature(self) -> Tensor: return self.temp.clamp(0.001, 0.5)

class ToyMethod(nn.Module):
    "The smallest Method: ITC on pooled patch and word embeddings; for testing the trainer."
    needs_pose, needs_counterparts = False, False
    def __init__(self, vocab_size: int, img_size: int = 32, embed_dim: int = 16, dropout: float = 0.0):
        super().__init__()
        self.backbone, self.drop = ToyBackbone(vocab_size, img_size, embed_dim), nn.Dropout(dropout)

    def embed_images(self, image: Tensor, pose: Tensor | None = None) -> ToyEmbedding:
        "G×3×H×W -> feat G×E, tokens G×17×E ([mean] + 16 patches)."
        b = self.backbone
        x = b.norm(self.drop(b.patch(image).flatten(2).transpose(1, 2)))             # G×16×E
        x = torch.cat([x.mean(1, keepdim=True), x], 1)                               # G×17×E
        return ToyEmbedding(F.normalize(b.img_proj(x[:, 0]), dim=-1), x, torch.ones(x.shape[:2], dtype=torch.long, device=x.device))

    def embed_texts(self, ids: Tensor, mask: Tensor) -> ToyEmbedding:
        "Q×L ids -> feat Q×E, tokens Q×L×E."
        b = self.backbone
        x = b.norm(self.drop(b.word(ids)))                                           # Q×L×E
        m = mask.unsqueeze(-1).to(x.dtype)
        return ToyEmbedding(F.normalize(b.txt_proj((x * m).sum(1) / m.sum(1)), dim=-1), x, mask)

    def itm_scores(self, txt, img_tokens: Tensor, img_mask: Tensor | None = None) -> Tensor:
        "N pairs (the texts a CrossText: tokens N×L×E, mask N×L) -> N cosine scores of the mean text token and the pooled image token."
        m = txt.mask.unsqueeze(-1).to(txt.tokens.dtype)
        return F.cosine_similarity((txt.tokens * m).sum(1) / m.sum(1), img_tokens[:, 0], dim=-1)

    def forward(self, batch: dict) -> dict:
        "{'loss_itc', 'loss'} of one batch."
        img = self.embed_images(batch['image'])
        txt = self.embed_texts(batch['text_ids'], batch['text_mask'])
        loss = itc_loss(img.feat, txt.feat, batch['idx'], self.backbone.temperature(), label_smoothing=0.0)
        return {'loss_itc': loss, 'loss': loss}
