"""The shipped data set: manifests, graph files, family splits, and the synthetic generator."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import regal
from data import synthetic

DATA = Path(__file__).resolve().parents[1] / "data"
REAL = DATA / "manifest.json"
SYN = DATA / "manifest_synthetic.json"


def _manifest(path: Path) -> dict:
    if not path.exists():
        pytest.skip(f"{path.name} not built (python -m data.build_dataset / data.synthetic)")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _graph_path(manifest_path: Path, doc: dict, entry: dict) -> Path:
    return manifest_path.parent / doc.get("root", "graphs") / entry["path"]


@pytest.fixture(scope="module")
def real() -> dict:
    return _manifest(REAL)


@pytest.fixture(scope="module")
def syn() -> dict:
    return _manifest(SYN)


def test_every_shipped_real_graph_loads_and_matches_its_manifest_entry(real):
    """Each shipped real graph loads with regal.load, validates, and has the manifest's counts and meta."""
    lo, hi = real["node_range"]
    for name, e in real["graphs"].items():
        if not e["shipped"]:
            continue
        g = regal.load(_graph_path(REAL, real, e))
        assert g.name == name
        assert (g.num_nodes, g.num_data_edges) == (e["nodes"], e["edges"]), name
        assert lo <= g.num_nodes <= hi, name
        assert int(g.bytes.sum()) == e["total_bytes"], name
        for key in ("family", "variant", "batch", "mode", "stage", "split"):
            assert g.meta[key] == e[key], (name, key)
        assert g.meta["source"] == "hlo" and g.meta["model"] == f"{e['variant']}_b{e['batch']}_{e['mode']}"
        assert g.resident.any() and not g.resident.all(), name


def test_real_splits_are_disjoint_by_family_and_large_enough(real):
    """No family is in two splits; every graph's split is its family's; test >= 25, valid >= 20 graphs."""
    fam_split = real["families"]
    seen: dict[str, str] = {}
    for split, names in real["splits"].items():
        for n in names:
            fam = real["graphs"][n]["family"]
            assert fam_split[fam] == split == real["graphs"][n]["split"], n
            assert seen.setdefault(fam, split) == split, f"family {fam} in two splits"
    listed = [n for names in real["splits"].values() for n in names]
    assert sorted(listed) == sorted(real["graphs"]) and len(set(listed)) == len(listed)
    assert len(real["graphs"]) >= 150
    assert len(real["splits"]["test"]) >= 25 and len(real["splits"]["valid"]) >= 20
    for fam in ("resnet", "mlp", "lstm", "transformer_enc"):
        assert fam_split[fam] == "train"
    for fam in ("unet", "vqvae"):
        assert fam_split[fam] == "test"


def test_real_manifest_covers_both_modes_and_stages_and_large_graphs(real):
    """Every split has fwd and train graphs, pre and opt stages; some graphs have thousands of nodes."""
    for split, names in real["splits"].items():
        kinds = {(real["graphs"][n]["mode"], real["graphs"][n]["stage"]) for n in names}
        assert kinds == {("fwd", "pre"), ("fwd", "opt"), ("train", "pre"), ("train", "opt")}, split
    nodes = [e["nodes"] for e in real["graphs"].values()]
    assert sum(n >= 5000 for n in nodes) >= 5


def test_shipped_graph_files_fit_the_30_mb_budget(real, syn):
    """The compressed graph files kept in git total at most 30 MB."""
    total = 0
    for path, doc in ((REAL, real), (SYN, syn)):
        for e in doc["graphs"].values():
            if e["shipped"]:
                f = _graph_path(path, doc, e)
                assert f.stat().st_size == e["file_bytes"], f
                total += f.stat().st_size
    assert total <= 30e6


def test_model_zoo_families_all_have_a_split():
    """Every family of data.models has a split, and every split family has a model."""
    pytest.importorskip("haiku")
    from data.build_dataset import FAMILY_SPLIT
    from data.models import FAMILIES
    assert set(FAMILIES) == set(FAMILY_SPLIT)
    assert set(FAMILY_SPLIT.values()) == {"train", "valid", "test"}


def test_build_config_traces_a_model_into_a_valid_graph(tmp_path):
    """One config (a small MLP train step) traces, imports and saves both stages with their meta."""
    pytest.importorskip("haiku")
    from data.build_dataset import Config, build_config
    (tmp_path / "real").mkdir()
    recs = build_config(Config("mlp_d16_w256", "mlp", 8, "train"), str(tmp_path))
    assert [r["status"] for r in recs] == ["kept", "kept"], recs
    for r, stage in zip(recs, ("pre", "opt")):
        g = regal.load(tmp_path / r["path"])
        assert g.name == f"mlp_d16_w256_b8_train_{stage}" and g.num_nodes == r["nodes"]
        assert g.meta["stage"] == stage and g.meta["batch"] == 8 and g.meta["split"] == "train"
        assert g.meta["scheduled"] == (stage == "opt")
        # 18 weight matrices + 18 biases, with Adam's two moments each, are resident arguments.
        assert int(g.resident.sum()) >= 3 * 34


def test_synthetic_manifest_graphs_load_with_sizes_in_range(syn):
    """Every synthetic graph loads, has 50..250 nodes, the manifest's counts, and a 300/50/50 split."""
    for name, e in syn["graphs"].items():
        g = regal.load(_graph_path(SYN, syn, e))
        assert synthetic.MIN_NODES <= g.num_nodes <= synthetic.MAX_NODES
        assert (g.name, g.num_nodes, g.num_data_edges) == (name, e["nodes"], e["edges"])
        assert g.meta["split"] == e["split"]
    assert {k: len(v) for k, v in syn["splits"].items()} == {"train": 300, "valid": 50, "test": 50}


def test_synthetic_files_are_what_the_generator_makes(syn):
    """A shipped synthetic graph equals generate(num_nodes, seed) for its manifest entry."""
    for name in list(syn["graphs"])[:: max(1, len(syn["graphs"]) // 20)]:
        e = syn["graphs"][name]
        g = regal.load(_graph_path(SYN, syn, e))
        assert g.to_records() == synthetic.generate(e["nodes"], e["seed"], name=name).to_records()


def test_synthetic_generate_is_deterministic_per_seed():
    """Same (num_nodes, seed) gives the same graph; another seed gives another graph."""
    a, b, c = synthetic.generate(120, 7), synthetic.generate(120, 7), synthetic.generate(120, 8)
    assert a.to_records() == b.to_records()
    assert a.to_records() != c.to_records()
    assert synthetic.sample_dataset(50, 3) == synthetic.sample_dataset(50, 3)


def test_synthetic_sizes_follow_normal_50_10():
    """Tensor sizes over many graphs have mean 50 +- 0.5 and standard deviation 10 +- 0.5."""
    sizes = np.concatenate([synthetic.generate(int(n), s).bytes
                            for n, s in zip(np.linspace(50, 250, 60).astype(int), range(60))])
    assert sizes.size > 8000 and sizes.min() >= 1
    assert abs(sizes.mean() - 50) < 0.5 and abs(sizes.std() - 10) < 0.5


@pytest.mark.parametrize("num_nodes", [50, 51, 137, 250])
def test_synthetic_graph_structure(num_nodes):
    """Exact node count; fan-in mostly 1..3; few resident parameters, all consumed; only the last layer is unconsumed."""
    g = synthetic.generate(num_nodes, seed=num_nodes)
    assert g.num_nodes == num_nodes
    fan_in = np.diff(g.in_ptr)[~g.resident]
    assert fan_in.min() >= 1 and fan_in.max() <= 8 and (fan_in <= 3).mean() > 0.95 and 1.5 < fan_in.mean() < 2.5
    n_res = int(g.resident.sum())
    assert 2 <= n_res <= num_nodes // 8 + 1
    consumers = np.diff(g.out_ptr)
    assert (consumers[g.resident] > 0).all()
    assert 1 <= int((consumers == 0).sum()) <= 4
    assert g.depth() > num_nodes // 4


# ------------------------------------------------------------------ the corpus (data/corpus.py)
CORPUS = DATA / "manifest_corpus.json"
CORPUS_SOURCES = {"haiku_hlo", "torch", "flax_hlo", "layers", "synthetic_regal", "synthetic_layered"}


@pytest.fixture(scope="module")
def corpus() -> dict:
    return _manifest(CORPUS)


def test_corpus_lists_every_source_with_at_least_10_graphs_and_existing_files(corpus):
    """Six sources, each with >= 10 graphs; every path exists; by_source and by_family partition the graphs."""
    assert corpus["root"] == "." and set(corpus["sources"]) == CORPUS_SOURCES
    by_source = corpus["splits"]["by_source"]
    assert set(by_source) == CORPUS_SOURCES
    assert sorted(k for ks in by_source.values() for k in ks) == sorted(corpus["graphs"])
    lo, hi = corpus["node_range"]
    for source, keys in by_source.items():
        assert len(keys) >= 10, source
        assert corpus["sources"][source]["graphs"] == len(keys)
        split_keys = [k for sp in ("train", "valid", "test") for k in corpus["splits"]["by_family"][source][sp]]
        assert sorted(split_keys) == sorted(keys), source
    for key, e in corpus["graphs"].items():
        assert key == f"{e['source']}/{e['name']}" and key in by_source[e["source"]]
        assert (DATA / e["path"]).is_file(), key
        assert lo <= e["nodes"] <= hi and e["granularity"] in ("op", "layer"), key
        assert e["mode"] in ("fwd", "train", None), key
    assert {e["granularity"] for e in corpus["graphs"].values()} == {"op", "layer"}


def test_corpus_family_splits_never_share_a_family(corpus):
    """Within each source a family is in one split only (REGAL's synthetic set, one family, splits by index)."""
    for source, splits in corpus["splits"]["by_family"].items():
        seen: dict[str, str] = {}
        for sp, keys in splits.items():
            for k in keys:
                assert corpus["graphs"][k]["split"] == sp
                fam = corpus["graphs"][k]["family"]
                if source != "synthetic_regal":
                    assert seen.setdefault(fam, sp) == sp, (source, fam)
        if source != "synthetic_regal":
            assert all(splits[sp] for sp in ("train", "valid", "test")), source


def test_corpus_graphs_load_one_per_source_mode_and_granularity(corpus):
    """A graph of each (source, granularity, mode, stage) kind loads with the manifest's node and edge counts."""
    picked: dict[tuple, str] = {}
    for key, e in corpus["graphs"].items():
        picked.setdefault((e["source"], e["granularity"], e["mode"], e["stage"]), key)
    assert len(picked) >= 12
    for key in picked.values():
        e = corpus["graphs"][key]
        g = regal.load(DATA / e["path"])
        assert (g.name, g.num_nodes, g.num_data_edges) == (e["name"], e["nodes"], e["edges"]), key
        assert g.resident.any() and not g.resident.all(), key


def test_synthetic_layered_is_deterministic_and_matches_the_shipped_files(tmp_path):
    """Same (family, seed): the same records and the same file bytes; shipped files are what it makes."""
    from data import synthetic_layered as sl
    from data._files import save_graph
    for fam in sl.FAMILIES:
        a, b = sl.generate(fam, 11), sl.generate(fam, 11)
        assert a.to_records() == b.to_records() and a.meta == b.meta
        assert sl.MIN_NODES <= a.num_nodes <= sl.MAX_NODES
        save_graph(a, str(tmp_path / "a.json.gz"))
        save_graph(b, str(tmp_path / "b.json.gz"))
        assert (tmp_path / "a.json.gz").read_bytes() == (tmp_path / "b.json.gz").read_bytes()
    assert sl.generate("resnet", 11).to_records() != sl.generate("resnet", 12).to_records()
    manifest = DATA / "manifest_synthetic_layered.json"
    if manifest.exists():
        doc = json.loads(manifest.read_text())
        for name, family, seed in sl.sample_dataset(200, 0)[:12]:
            g = sl.generate(family, seed, name=name)
            g.meta.update(split=sl.FAMILY_SPLIT[family], dataset_seed=0)
            save_graph(g, str(tmp_path / "x.json.gz"))
            shipped = DATA / doc["root"] / doc["graphs"][name]["path"]
            assert (tmp_path / "x.json.gz").read_bytes() == shipped.read_bytes(), name


def test_synthetic_layered_training_step_mirrors_the_forward_pass():
    """A train graph holds a gradient node per forward layer that reads saved activations, and one update per parameter."""
    from data import synthetic_layered as sl
    fwd = sl.generate("resnet", 3, mode="fwd", granularity="layer")
    train = sl.generate("resnet", 3, mode="train", granularity="layer")
    assert fwd.meta["mode"] == "fwd" and train.meta["mode"] == "train"
    ops = list(train.ops)
    fwd_layers = [op for op, r in zip(fwd.ops, fwd.resident) if not r]
    convs = sum(op.startswith("conv") for op in fwd_layers)
    assert sum(op.startswith("conv") and op.endswith("_grad") for op in ops) >= convs - 1  # not the stem's input
    assert sum(op.startswith("conv") and op.endswith("_wgrad") for op in ops) == convs
    assert sum(op.endswith("_update") for op in ops) >= convs
    grad = next(v for v, op in enumerate(ops) if op.startswith("conv") and op.endswith("_grad"))
    # the gradient of a conv reads forward activations, so they stay alive until the backward pass
    assert any(not train.ops[u].endswith(("_grad", "add_n")) and not train.resident[u] for u in train.inputs(grad))
