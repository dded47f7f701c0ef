"""The official SeDA model's state-dict keys and shapes on a small configuration -> tests/fixtures/seda_official_keys.json.

Runs the authors' code (https://github.com/ErgastiAlex/SeDA, models/model_search.py `Search`) from a git archive of
its mirror, in a venv with transformers 4 (its models/bert.py imports names that transformers 5 removed):

    git -C /work/.mirror/ErgastiAlex+SeDA/repo archive HEAD models configs | tar -x -C /tmp/seda_official
    OMP_NUM_THREADS=1 /work/venv-seda/bin/python runs/parity/seda_official_keys.py /tmp/seda_official tests/fixtures/seda_official_keys.json

Only the model is built (no data, no checkpoint); BERT is built from its config instead of `from_pretrained`.
"""
import json, sys, subprocess, tempfile
from pathlib import Path
import torch

MIRROR = '/work/.mirror/ErgastiAlex+SeDA/repo'
# the small configuration of runs/parity/cmp_parity.py (tests/fixtures/cmp_official_keys.json), so that the two layouts compare key
# for key; the final Swin width must be 1024 and BERT's 768: the official STP widths are hard-coded
VISION = dict(vision_width=1024, image_res=224, h=224, w=224, window_size=7, embed_dim=128, depths=[2, 2, 2, 2],
              num_heads=[4, 8, 16, 32], drop_rate=0, drop_path_rate=0.1)
TEXT = dict(architectures=['BertForMaskedLM'], attention_probs_dropout_prob=0.1, hidden_act='gelu', hidden_dropout_prob=0.1,
            hidden_size=768, initializer_range=0.02, intermediate_size=1024, layer_norm_eps=1e-12, max_position_embeddings=64,
            model_type='bert', num_attention_heads=12, num_hidden_layers=12, pad_token_id=0, type_vocab_size=2, vocab_size=1000,
            fusion_layer=6, encoder_width=1024)   # 12 layers of width 768: init_params names layers 4, 5, 10, 11

def official_search(code_dir: str, use_ca: bool = False, seed: int = 0):
    "The official Search model on the small configuration (its module `models.*` imported from `code_dir`)."
    sys.path.insert(0, code_dir)
    import models.cmp as cmp
    from models.bert import BertConfig, BertForMaskedLM
    from models.model_search import Search
    tmp = Path(tempfile.mkdtemp())
    (tmp / 'vision.json').write_text(json.dumps(VISION)); (tmp / 'text.json').write_text(json.dumps(TEXT))
    def build_text_encoder(config, vision_width):    # the official builder, without the BERT download
        c = BertConfig.from_json_file(config['text_config']); c.encoder_width = vision_width
        return BertForMaskedLM(c)
    cmp.build_text_encoder = build_text_encoder
    config = dict(vision_config=str(tmp / 'vision.json'), text_config=str(tmp / 'text.json'), load_params=False, embed_dim=2048,
                  itc_dp=0.5, temp=0.07, label_smooth=0.2, be_hard=True, be_pose_img=True, pose_conv=True, use_ca=use_ca)
    torch.manual_seed(seed)
    return Search(config), config

if __name__ == '__main__':
    code_dir, out = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    commit = subprocess.run(['git', '-C', MIRROR, 'rev-parse', 'HEAD'], capture_output=True, text=True).stdout.strip()
    m, config = official_search(code_dir)
    keys = {k: list(v.shape) for k, v in m.state_dict().items()}
    ca, _ = official_search(code_dir, use_ca=True)
    ca_keys = {k: list(v.shape) for k, v in ca.state_dict().items() if k not in keys}
    doc = dict(provenance=f"https://github.com/ErgastiAlex/SeDA commit {commit}: models/model_search.py Search(config) with be_hard, "
                          "be_pose_img and pose_conv on (configs/cmp_decouple.yaml), state_dict() as Search.py saves it under 'model'; "
                          "small configuration of runs/parity/seda_official_keys.py, the same as runs/parity/cmp_parity.py's (Swin depths "
                          "2-2-2-2 at 224 px, BERT 12 layers of width 768, FFN 1024, 1000 words; the STP widths 1024/768 are hard-coded there)",
               config=dict(vision=VISION, text=TEXT, model={k: v for k, v in config.items() if not k.endswith('_config')}),
               keys=keys,
               keys_use_ca=ca_keys,                       # added by use_ca True (the cross-attention arm, ablation row II)
               init_params=sorted(m.init_params))         # trained at lr × lr_mult (2) by the official create_optimizer
    Path(out).write_text(json.dumps(doc, indent=1) + '\n')
    print(out, len(keys), 'keys,', len(ca_keys), 'more with use_ca,', len(m.init_params), 'init_params')
