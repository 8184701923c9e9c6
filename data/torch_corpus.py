"""PyTorch graphs for the corpus: torchvision and Hugging Face models through `regal.torch`.

    .venv-torch/bin/python -m data.torch_corpus --out data/graphs/torch     # the torch venv (data/README.md)

The PyTorch source of the corpus (`data/manifest_corpus.json`), at operator granularity,
beside the 12 graphs of `data.importer_graphs` (ResNet-50, MobileNetV3-Large, ViT-B/16 and BERT
base through ONNX and torch), which it does not repeat. Every model comes from its constructor
with random weights (`torchvision.models.<name>(weights=None)`, a `transformers` model from a
small config): nothing is downloaded. Each is imported twice with `regal.torch.from_module`:
the forward pass (`torch.export`, eval mode, under `torch.no_grad`) and one training step (forward, backward, in-place
SGD-with-momentum update for the CNNs and Adam for the transformers, traced with `make_fx`;
the loss is the importer's default, the sum of the means of the floating outputs). Inputs are
small (64-128 pixels, batch 2-8, 64-128 tokens) to keep tracing quick; operator counts barely
depend on them. Graphs outside 50-20,000 nodes are dropped. Writes `<out>/*.json.gz` and
`data/manifest_torch.json` (family split in `FAMILY_SPLIT`, which also covers the importers'
models). Deterministic for the same torch version.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

from data._files import save_graph, write_source_manifest

__all__ = ["FAMILY_SPLIT", "MODELS", "MIN_NODES", "MAX_NODES", "IMPORTER_FAMILY", "main"]

MIN_NODES, MAX_NODES = 50, 20_000

#: Family-level split of the torch source (the importers' four models included).
FAMILY_SPLIT = {"resnet": "train", "mobilenet": "train", "densenet": "train", "squeezenet": "train",
                "shufflenet": "train", "regnet": "train", "bert": "train", "gpt2": "train", "llama": "train",
                "efficientnet": "valid", "googlenet": "valid", "bart": "valid",
                "convnext": "test", "vit": "test", "swin": "test", "t5": "test"}
#: Families of the models of `data.importer_graphs`.
IMPORTER_FAMILY = {"resnet50": "resnet", "mobilenet_v3_large": "mobilenet", "vit_b_16": "vit", "bert_base": "bert"}


def _tv(name: str, **kw):
    def make():
        import torchvision
        return getattr(torchvision.models, name)(weights=None, **kw)
    return make


def _vit_small():
    from torchvision.models.vision_transformer import VisionTransformer
    return VisionTransformer(image_size=64, patch_size=8, num_layers=6, num_heads=6, hidden_dim=384, mlp_dim=1536,
                             num_classes=100)


def _hf(config_cls: str, model_cls: str, **cfg):
    def make():
        import transformers
        config = getattr(transformers, config_cls)(**cfg)
        return getattr(transformers, model_cls)(config)
    return make


def _images(hw: int, batch: int):
    return lambda: (torch.randn(batch, 3, hw, hw),)


def _tokens(seq: int, batch: int, vocab: int, decoder: bool = False):
    def inputs():
        ids = torch.randint(0, vocab, (batch, seq))
        return (ids, torch.ones(batch, seq, dtype=torch.long)) + ((ids,) if decoder else ())
    return inputs


class _Seq2Seq(torch.nn.Module):
    """(input_ids, attention_mask, decoder_input_ids) positional wrapper for encoder-decoders."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          decoder_input_ids=decoder_input_ids, use_cache=False).logits


class _LM(torch.nn.Module):
    """(input_ids, attention_mask) -> logits, without a cache (plain forward)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, **({"use_cache": False} if
                         "use_cache" in self.model.forward.__code__.co_varnames else {}))
        return out.logits if hasattr(out, "logits") else out.last_hidden_state


_BERT = dict(vocab_size=8192, hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
             max_position_embeddings=256)

# name -> (family, constructor, inputs, wrapper, optimizer, description)
MODELS = {
    "resnet18": ("resnet", _tv("resnet18"), _images(64, 8), None, "sgd", "torchvision ResNet-18, 64x64"),
    "resnet34": ("resnet", _tv("resnet34"), _images(64, 4), None, "sgd", "torchvision ResNet-34, 64x64"),
    "resnext50": ("resnet", _tv("resnext50_32x4d"), _images(64, 2), None, "sgd", "torchvision ResNeXt-50 32x4d, 64x64"),
    "mobilenet_v2": ("mobilenet", _tv("mobilenet_v2"), _images(96, 8), None, "sgd", "torchvision MobileNetV2, 96x96"),
    "mobilenet_v3_small": ("mobilenet", _tv("mobilenet_v3_small"), _images(96, 8), None, "sgd",
                           "torchvision MobileNetV3-Small, 96x96"),
    "mnasnet": ("mobilenet", _tv("mnasnet1_0"), _images(96, 4), None, "sgd", "torchvision MNASNet 1.0, 96x96"),
    "densenet121": ("densenet", _tv("densenet121"), _images(64, 4), None, "sgd", "torchvision DenseNet-121, 64x64"),
    "squeezenet": ("squeezenet", _tv("squeezenet1_1"), _images(128, 8), None, "sgd", "torchvision SqueezeNet 1.1, 128x128"),
    "shufflenet": ("shufflenet", _tv("shufflenet_v2_x1_0"), _images(96, 8), None, "sgd",
                   "torchvision ShuffleNetV2 x1.0, 96x96"),
    "regnet_y_400mf": ("regnet", _tv("regnet_y_400mf"), _images(96, 4), None, "sgd", "torchvision RegNetY-400MF, 96x96"),
    "efficientnet_b0": ("efficientnet", _tv("efficientnet_b0"), _images(96, 4), None, "sgd",
                        "torchvision EfficientNet-B0, 96x96"),
    "googlenet": ("googlenet", _tv("googlenet", aux_logits=False, init_weights=False), _images(96, 4), None, "sgd",
                  "torchvision GoogLeNet (Inception v1), no aux heads, 96x96"),
    "convnext_tiny": ("convnext", _tv("convnext_tiny"), _images(64, 2), None, "adam", "torchvision ConvNeXt-T, 64x64"),
    "vit_s8_64": ("vit", _vit_small, _images(64, 8), None, "adam", "torchvision VisionTransformer, 6 layers, d=384, patch 8 on 64x64"),
    "swin_t": ("swin", _tv("swin_t"), _images(64, 2), None, "adam", "torchvision Swin-T, 64x64"),
    "bert_4l": ("bert", _hf("BertConfig", "BertModel", **_BERT), _tokens(128, 8, 8192), _LM, "adam",
                "transformers BertModel, 4 layers, d=256, 128 tokens"),
    "distilbert": ("bert", _hf("DistilBertConfig", "DistilBertModel", vocab_size=8192, dim=384, n_layers=3,
                               n_heads=6, hidden_dim=1536), _tokens(128, 4, 8192), _LM, "adam",
                   "transformers DistilBertModel, 3 layers, d=384"),
    "gpt2_4l": ("gpt2", _hf("GPT2Config", "GPT2LMHeadModel", vocab_size=8192, n_positions=256, n_embd=256, n_layer=4,
                            n_head=4, bos_token_id=0, eos_token_id=0), _tokens(128, 4, 8192), _LM, "adam",
                "transformers GPT2LMHeadModel, 4 layers, d=256"),
    "llama_4l": ("llama", _hf("LlamaConfig", "LlamaForCausalLM", vocab_size=8192, hidden_size=256,
                              intermediate_size=688, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                              max_position_embeddings=256), _tokens(128, 4, 8192), _LM, "adam",
                 "transformers LlamaForCausalLM, 4 layers, d=256, GQA 4/2"),
    "bart_2x2": ("bart", _hf("BartConfig", "BartForConditionalGeneration", vocab_size=8192, d_model=256,
                             encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                             encoder_ffn_dim=1024, decoder_ffn_dim=1024, max_position_embeddings=256),
                 _tokens(64, 4, 8192, decoder=True), _Seq2Seq, "adam", "transformers BART, 2+2 layers, d=256"),
    "t5_2x2": ("t5", _hf("T5Config", "T5ForConditionalGeneration", vocab_size=8192, d_model=256, d_kv=64, d_ff=1024,
                         num_layers=2, num_decoder_layers=2, num_heads=4), _tokens(64, 4, 8192, decoder=True),
               _Seq2Seq, "adam", "transformers T5, 2+2 layers, d=256"),
}


def build(name: str, out_dir: str) -> list[dict]:
    """Import one model forward and as a training step; save those in range; one record each."""
    import regal.torch
    family, make, inputs, wrap, optimizer, notes = MODELS[name]
    records = []
    for training in (False, True):
        mode = "train" if training else "fwd"
        gname = f"torch_{name}_{mode}"
        torch.manual_seed(0)
        model = make()
        if wrap is not None:
            model = wrap(model)
        args = inputs()
        t0 = time.perf_counter()
        try:  # the forward under no_grad: LLaMA's rotary embedding otherwise exports a set_grad_enabled region
            with torch.set_grad_enabled(training):
                g = regal.torch.from_module(model, args, training=training, optimizer=optimizer, name=gname)
        except Exception as e:  # a model that does not trace: log it, keep building
            records.append({"name": gname, "status": "failed", "error": f"{type(e).__name__}: {e}"[:300]})
            continue
        secs = time.perf_counter() - t0
        rec = {"name": gname, "nodes": g.num_nodes, "seconds": round(secs, 1)}
        if not MIN_NODES <= g.num_nodes <= MAX_NODES:
            records.append(dict(rec, status="out of range"))
            continue
        batch = int(args[0].shape[0])
        split = FAMILY_SPLIT[family]
        g.meta.update(family=family, variant=name, batch=batch, mode=mode, split=split, description=notes,
                      framework="pytorch", torch_version=torch.__version__.split("+")[0],
                      num_parameters=int(sum(p.numel() for p in model.parameters())))
        file_bytes = save_graph(g, os.path.join(out_dir, f"{gname}.json.gz"))
        records.append(dict(rec, status="kept", path=f"{os.path.basename(out_dir)}/{gname}.json.gz", family=family,
                            variant=name, batch=batch, mode=mode, split=split, edges=g.num_data_edges,
                            control_edges=g.num_control_edges, total_bytes=int(g.bytes.sum()), file_bytes=file_bytes))
    return records


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m data.torch_corpus", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="data/graphs/torch", help="output folder")
    p.add_argument("--only", action="append", default=None, metavar="MODEL")
    p.add_argument("--manifest", default=None, help="default: <folder holding the graphs folder>/manifest_torch.json")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    os.makedirs(a.out, exist_ok=True)
    out_abs = os.path.abspath(a.out)
    graphs_root = os.path.dirname(out_abs)
    manifest_path = a.manifest or os.path.join(os.path.dirname(graphs_root), "manifest_torch.json")
    t0 = time.perf_counter()
    kept: dict[str, dict] = {}
    for name in MODELS:
        if a.only and name not in a.only:
            continue
        for r in build(name, a.out):
            extra = f"{r['nodes']} nodes, {r['seconds']}s" if "nodes" in r else r.get("error", "")
            print(f"[{time.perf_counter() - t0:5.0f}s] {r['name']}: {r['status']} ({extra})", flush=True)
            if r["status"] == "kept":
                kept[r["name"]] = {k: v for k, v in r.items() if k not in ("name", "status", "seconds")}
    kept = write_source_manifest(kept, a.out, manifest_path, a.only, description=__doc__.split("\n")[0],
                                 node_range=(MIN_NODES, MAX_NODES), split_policy="by family (FAMILY_SPLIT)",
                                 families=FAMILY_SPLIT, extra={"importer_families": dict(IMPORTER_FAMILY)})
    print(f"wrote {len(kept)} graphs to {a.out} and {manifest_path}; {time.perf_counter() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
