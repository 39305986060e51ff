"""Datasets of the training workloads: canonical names, spellings, training-set size, what a sample is.

``canonical_dataset`` / ``dataset_info`` accept any usual spelling (``CIFAR-10``, ``cifar_10``);
``name_key`` is the spelling-insensitive key the zoo uses for model names too. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


def name_key(name: str) -> str:
    """Spelling-insensitive key: lower case without ``-``, ``_``, ``.``, spaces."""
    return re.sub(r"[\s\-_.]+", "", name.strip().lower())


@dataclass(frozen=True, slots=True)
class DatasetInfo:
    """A dataset: its canonical name, aliases, training-set size in samples, and what a sample is."""

    name: str
    aliases: tuple[str, ...]
    train_samples: int
    sample: str
    source: str


DATASETS: tuple[DatasetInfo, ...] = (
    DatasetInfo("cifar10", ("cifar-10",), 50_000, "32x32 image", "Krizhevsky 2009"),
    DatasetInfo("cifar100", ("cifar-100",), 50_000, "32x32 image", "Krizhevsky 2009"),
    DatasetInfo(
        "imagenet", ("ilsvrc2012", "imagenet1k", "imagenet-1k"), 1_281_167, "224x224 image", "ILSVRC 2012"
    ),
    # SQuAD v1.1 has 87,599 questions; BERT's tokenizer with max_seq 384 / stride 128 yields 88,524
    # features (HuggingFace run_qa), which is what one epoch iterates over.
    DatasetInfo("squad", ("squad1.1", "squadv1"), 88_524, "384-token feature", "Rajpurkar 2016; HF run_qa"),
    DatasetInfo("sentiment140", ("sent140",), 1_600_000, "tweet (<=128 tokens)", "Go et al. 2009"),
    DatasetInfo(
        "librispeech", ("librispeech960",), 281_241, "utterance (960 h train)", "Panayotov et al. 2015"
    ),
    # NCF trains on the positives minus one held-out item per user (1,000,209 - 6,040) with 4 sampled
    # negatives each (He et al. 2017): 994,169 x 5 samples per epoch.
    DatasetInfo("movielens-1m", ("ml-1m", "ml1m", "movielens1m"), 4_970_845, "rating", "He et al. 2017"),
    DatasetInfo(
        "movielens-20m", ("ml-20m", "ml20m", "movielens20m"), 19_861_770 * 5, "rating", "Harper 2015"
    ),
    # Wikitext-2: 2,088,628 training tokens in sequences of 35 (PyTorch word_language_model bptt).
    DatasetInfo("wikitext-2", ("wikitext2", "wt2"), 59_675, "35-token sequence", "Merity et al. 2016"),
    DatasetInfo("multi30k", ("multi-30k",), 29_000, "sentence pair", "Elliott et al. 2016"),
    DatasetInfo("voc", ("pascal-voc", "pascalvoc", "voc0712"), 16_551, "416x416 image", "VOC 2007+2012"),
    DatasetInfo("monet2photo", (), 6_287, "256x256 image pair", "Zhu et al. 2017"),
    DatasetInfo("pong", ("atari-pong",), 1_000_000, "environment step", "Gavel A3C job (estimate)"),
    DatasetInfo("openwebtext", ("owt",), 8_000_000, "1024-token sequence", "Gokaslan & Cohen 2019"),
    DatasetInfo("wmt16", ("wmt", "wmt14"), 4_500_000, "sentence pair", "WMT 2016 en-de"),
    # LLM pre-training / fine-tuning text: a sample is one sequence of the job's sequence length, and the
    # corpus size is the job's business (its work is given in iterations or samples), hence 0.
    DatasetInfo(
        "text",
        ("c4", "pile", "the-pile", "redpajama", "slimpajama", "fineweb", "dolma", "alpaca"),
        0,
        "sequence of sequenceLength tokens",
        "LLM training text (corpus size not modelled)",
    ),
)

_DATASET_BY_KEY: dict[str, DatasetInfo] = {}
for _d in DATASETS:
    for _a in (_d.name, *_d.aliases):
        _DATASET_BY_KEY[name_key(_a)] = _d


def canonical_dataset(name: str) -> str:
    """Canonical dataset name for a spelling (``CIFAR-10`` -> ``cifar10``); unknown names lower-cased."""
    d = _DATASET_BY_KEY.get(name_key(name))
    return d.name if d else name.strip().lower()


def dataset_info(name: str) -> DatasetInfo | None:
    """The dataset entry for a name in any usual spelling, or None."""
    return _DATASET_BY_KEY.get(name_key(name))
