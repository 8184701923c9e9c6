"""Build the shipped ONNX fixtures (`data/onnx/*.onnx.gz`) from real architectures.

    .venv-torch/bin/python -m data.build_onnx --out data/onnx

Needs the torch venv (see data/README.md, "ONNX and PyTorch graphs": torch, torchvision,
transformers, onnx, onnxscript). Every model is built with random weights from its own
constructor (`torchvision.models.<name>(weights=None)`, `transformers.BertModel(BertConfig())`):
nothing is downloaded. Each is exported by `torch.onnx.export(..., dynamo=True)` (the
exporter's defaults: its optimizer folds each BatchNorm into the preceding convolution) with a
symbolic `batch` dimension (and `sequence` for BERT), then **stripped**: every initializer
over 1 KiB keeps its name, dims and type but its data is replaced by an external-data
reference to `<model>.weights`, a file that is not written, exactly what `onnx.save(...,
save_as_external_data=True)` leaves once the data file is deleted. `regal.onnx.load_onnx`
imports them from shapes alone. Files are gzip-compressed with no name or time in the header.

`data/onnx/manifest.json` records, per model, the framework's own numbers the tests check
the import against: parameter names and bytes (`p.numel() * p.element_size()`), the bytes of
BatchNorm parameters (which the exporter folds away), the Conv2d / Linear module counts, and
the output shapes at the reference dims.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time

import onnx
import torch
from onnx import TensorProto

REFERENCE_DIMS = {"batch": 8, "sequence": 128}
STRIP_THRESHOLD_BYTES = 1024


def _torchvision(name: str):
    import torchvision
    return getattr(torchvision.models, name)(weights=None)


def _bert():
    from transformers import BertConfig, BertModel
    return BertModel(BertConfig())


# name -> (constructor, framework, description, example inputs at given dims, dynamic dims,
#          input names, output names)
def _image_inputs(d):
    return (torch.randn(d["batch"], 3, 224, 224),)


def _token_inputs(d):
    return (torch.randint(0, 30522, (d["batch"], d["sequence"])),)


MODELS = {
    "resnet50": (lambda: _torchvision("resnet50"), "torchvision", "ResNet-50, 224x224", _image_inputs,
                 ({0: "batch"},), ["input"], ["logits"]),
    "mobilenet_v3_large": (lambda: _torchvision("mobilenet_v3_large"), "torchvision",
                           "MobileNetV3-Large, 224x224", _image_inputs, ({0: "batch"},), ["input"], ["logits"]),
    "vit_b_16": (lambda: _torchvision("vit_b_16"), "torchvision", "ViT-B/16, 224x224", _image_inputs,
                 ({0: "batch"},), ["input"], ["logits"]),
    "bert_base": (_bert, "transformers", "BERT-base (BertConfig() defaults)", _token_inputs,
                  ({0: "batch", 1: "sequence"},), ["input_ids"], ["last_hidden_state", "pooler_output"]),
}


def randomize(module: torch.nn.Module) -> None:
    """Fresh random values in every floating parameter and buffer (seeded by the caller).

    Constructors initialise many tensors to constants (LayerNorm to ones and zeros, biases to
    zeros, BatchNorm statistics to 0 and 1); the exporter's optimizer would then merge equal
    initializers and drop zero biases, and the file would no longer show one initializer per
    parameter. Random values keep every tensor distinct; only their values change, not shapes.
    """
    with torch.no_grad():
        for name, t in [*module.named_parameters(), *module.named_buffers()]:
            if t.is_floating_point():
                if name.endswith("running_var"):
                    t.uniform_(0.5, 1.5)
                else:
                    t.normal_(0.0, 0.02)


def strip_weights(model: onnx.ModelProto, location: str) -> int:
    """Replace the data of every initializer over the threshold by an external-data reference
    to `location` (not written); returns the bytes left out."""
    offset = 0
    for t in model.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            continue
        data = onnx.numpy_helper.to_array(t).tobytes() if not t.raw_data else t.raw_data
        if len(data) <= STRIP_THRESHOLD_BYTES:
            continue
        for f in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
            t.ClearField(f)
        t.data_location = TensorProto.EXTERNAL
        del t.external_data[:]
        for k, v in (("location", location), ("offset", str(offset)), ("length", str(len(data)))):
            e = t.external_data.add()
            e.key, e.value = k, v
        offset += len(data)
    return offset


def framework_facts(module: torch.nn.Module, example, output_names) -> dict:
    """What torch itself says about the model (checked by tests/test_onnx.py)."""
    params = {n: p.numel() * p.element_size() for n, p in module.named_parameters()}
    bn = sum(p.numel() * p.element_size() for m in module.modules()
             if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for p in m.parameters())
    with torch.no_grad():
        out = module(*example)
    leaves = [out] if isinstance(out, torch.Tensor) else [v for v in out.values()] if hasattr(out, "values") \
        else list(out)
    return {
        "num_parameters": sum(p.numel() for p in module.parameters()),
        "parameter_bytes": sum(params.values()),
        "parameters": params,
        "batchnorm_parameter_bytes": bn,
        "conv2d_modules": sum(isinstance(m, torch.nn.Conv2d) for m in module.modules()),
        "linear_modules": sum(isinstance(m, torch.nn.Linear) for m in module.modules()),
        "outputs": {name: {"shape": list(t.shape), "bytes": t.numel() * t.element_size()}
                    for name, t in zip(output_names, leaves)},
    }


def build(name: str, out_dir: str) -> tuple[dict, float]:
    make, framework, description, inputs, dynamic, input_names, output_names = MODELS[name]
    torch.manual_seed(0)
    module = make().eval()
    randomize(module)
    dims = {k: v for k, v in REFERENCE_DIMS.items() if any(k in d.values() for d in dynamic)}
    example = inputs(REFERENCE_DIMS)
    dyn = tuple({ax: torch.export.Dim(sym, min=2 if sym == "batch" else 8) for ax, sym in d.items()}
                for d in dynamic)
    t0 = time.perf_counter()
    program = torch.onnx.export(module, example, dynamo=True, dynamic_shapes=dyn, input_names=input_names,
                                output_names=output_names, verbose=False)
    proto = program.model_proto
    export_s = time.perf_counter() - t0
    facts = framework_facts(module, example, output_names)
    stripped = strip_weights(proto, f"{name}.weights")
    path = os.path.join(out_dir, f"{name}.onnx.gz")
    with open(path, "wb") as f:
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=9) as gz:
            gz.write(proto.SerializeToString())
    framework_version = __import__(framework).__version__
    return {
        "file": os.path.basename(path), "description": description,
        "framework": f"{framework} {framework_version}", "torch": torch.__version__, "onnx": onnx.__version__,
        "opset": next(o.version for o in proto.opset_import if o.domain == ""),
        "onnx_nodes": len(proto.graph.node), "initializers": len(proto.graph.initializer),
        "stripped_bytes": stripped, "compressed_bytes": os.path.getsize(path),
        "reference_dims": dims, "inputs": input_names, "torch_facts": facts,
    }, export_s


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="data/onnx")
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    manifest_path = os.path.join(args.out, "manifest.json")
    manifest = {"models": {}}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
    for name in args.models:
        entry, export_s = build(name, args.out)
        manifest["models"][name] = entry
        print(f"{name}: {entry['onnx_nodes']} ONNX nodes, {entry['compressed_bytes']:,} bytes "
              f"compressed, export {export_s:.1f} s", flush=True)
    manifest["models"] = dict(sorted(manifest["models"].items()))
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=False)
        f.write("\n")


if __name__ == "__main__":
    main()
