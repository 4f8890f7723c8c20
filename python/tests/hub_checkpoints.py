"""Checkpoints as huggingface_hub lays them out, for the tests that load them (local files,
http://, s3://): written by hub's splitter and safetensors, read back by safetensors."""

import json
import os

import pytest


def hub_save(folder, sd, max_shard_size=40_000):
    """A checkpoint as huggingface_hub splits it, each shard written by safetensors."""
    hub = pytest.importorskip("huggingface_hub")
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    split = hub.split_state_dict_into_shards_factory(
        sd, get_storage_size=lambda a: a.nbytes, max_shard_size=max_shard_size,
        filename_pattern="model{suffix}.safetensors")
    os.makedirs(folder, exist_ok=True)
    for filename, names in split.filename_to_tensors.items():
        safetensors_numpy.save_file({n: sd[n] for n in names}, os.path.join(folder, filename),
                                    metadata={"format": "pt"})
    if split.is_sharded:
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": split.metadata, "weight_map": split.tensor_to_filename}, f)
    return split


def reference(folder):
    """Every tensor of the folder's shards, as safetensors reads them."""
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    out = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            out.update(safetensors_numpy.load_file(os.path.join(folder, name)))
    return out
