"""Model zoo: features of common training workloads (parameters, training FLOPs per sample) and datasets.

A TrainingJob names a model (``resnet50``) or gives ``parameters`` and ``flopsPerSample`` directly. The
zoo turns a name, in any usual spelling (``resnet50``, ``resnet-50``, ``ResNet-50``, ``resnet_50``), into
a ``ModelInfo`` and, together with the dataset, into the work one sample costs: ResNet-18 on CIFAR-10
(32x32 images) is about 20x cheaper per sample than on ImageNet (224x224).

FLOPs are training FLOPs per sample, counted as 3 x forward (forward + backward ~ 2 x forward), with one
multiply-add = 2 FLOPs. Sources: torchvision model documentation (parameters and GFLOPS, which are
multiply-adds), the original papers, and the benchmark suites the measured tables come from (Gavel,
Pollux, Zeus). Figures marked "estimate" are derived from the architecture by the 6 x params x tokens
rule (Kaplan et al., 2020) or by layer counting and are good to a factor of ~1.5. Pure module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum


class Family(StrEnum):
    """Coarse architecture family: decides the kernel mix (conv vs GEMM vs memory-bound embedding)."""

    CNN = "cnn"
    TRANSFORMER = "transformer"
    RNN = "rnn"
    RECSYS = "recsys"
    GAN = "gan"
    RL = "rl"
    DETECTION = "detection"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class DatasetInfo:
    """A dataset: its canonical name, aliases, training-set size in samples, and what a sample is."""

    name: str
    aliases: tuple[str, ...]
    train_samples: int
    sample: str
    source: str


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """A zoo model: parameters, training FLOPs per sample on its default and other datasets."""

    name: str
    aliases: tuple[str, ...]
    family: Family
    params: float
    default_dataset: str
    flops_per_sample: dict[str, float] = field(default_factory=dict)
    source: str = ""

    def flops_on(self, dataset: str = "") -> float:
        """Training FLOPs per sample on ``dataset`` (its canonical name); the default dataset otherwise."""
        ds = canonical_dataset(dataset) if dataset else self.default_dataset
        if ds in self.flops_per_sample:
            return self.flops_per_sample[ds]
        return self.flops_per_sample[self.default_dataset]


def _key(name: str) -> str:
    """Spelling-insensitive key: lower case without ``-``, ``_``, ``.``, spaces."""
    return re.sub(r"[\s\-_.]+", "", name.strip().lower())


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
)

_DATASET_BY_KEY: dict[str, DatasetInfo] = {}
for _d in DATASETS:
    for _a in (_d.name, *_d.aliases):
        _DATASET_BY_KEY[_key(_a)] = _d


def canonical_dataset(name: str) -> str:
    """Canonical dataset name for a spelling (``CIFAR-10`` -> ``cifar10``); unknown names lower-cased."""
    d = _DATASET_BY_KEY.get(_key(name))
    return d.name if d else name.strip().lower()


def dataset_info(name: str) -> DatasetInfo | None:
    """The dataset entry for a name in any usual spelling, or None."""
    return _DATASET_BY_KEY.get(_key(name))


def _cnn(macs_imagenet: float, macs_cifar: float) -> dict[str, float]:
    """Training FLOPs per sample = 3 passes x 2 FLOPs per multiply-add."""
    return {
        "imagenet": 6.0 * macs_imagenet,
        "cifar10": 6.0 * macs_cifar,
        "cifar100": 6.0 * macs_cifar,
    }


def _tokens(non_embedding_params: float, layers: int, d_model: int, seq: int) -> float:
    """6 N T for the dense layers plus 12 L T^2 d for attention scores (Kaplan et al. 2020)."""
    return 6.0 * non_embedding_params * seq + 12.0 * layers * seq * seq * d_model


MODELS: tuple[ModelInfo, ...] = (
    ModelInfo(
        "resnet18",
        ("resnet", "rn18"),
        Family.CNN,
        11.7e6,
        "imagenet",
        # torchvision: 11.7M params, 1.81 G multiply-adds at 224; CIFAR variant (3x3 stem, no pool):
        # 11.2M params, 0.56 G multiply-adds at 32x32 (kuangliu/pytorch-cifar, used by Gavel and Pollux).
        _cnn(1.81e9, 0.56e9),
        "torchvision docs; He et al. 2016",
    ),
    ModelInfo(
        "resnet50",
        ("rn50",),
        Family.CNN,
        25.6e6,
        "imagenet",
        # torchvision: 25.6M params, 4.09 G multiply-adds at 224; CIFAR variant 1.30 G at 32x32.
        _cnn(4.09e9, 1.30e9),
        "torchvision docs; He et al. 2016",
    ),
    ModelInfo(
        "resnet101",
        ("rn101",),
        Family.CNN,
        44.5e6,
        "imagenet",
        _cnn(7.80e9, 2.52e9),
        "torchvision docs",
    ),
    ModelInfo(
        "vgg16",
        ("vgg",),
        Family.CNN,
        138.4e6,
        "imagenet",
        # torchvision: 138.4M params, 15.47 G multiply-adds; CIFAR VGG-16: 14.7M params, 0.31 G.
        _cnn(15.47e9, 0.31e9),
        "torchvision docs; Simonyan & Zisserman 2015",
    ),
    ModelInfo(
        "inception_v3",
        ("inceptionv3", "inception", "googlenetv3"),
        Family.CNN,
        27.2e6,
        "imagenet",
        # torchvision: 27.2M params, 5.71 G multiply-adds at 299x299.
        _cnn(5.71e9, 0.60e9),
        "torchvision docs; Szegedy et al. 2016",
    ),
    ModelInfo(
        "mobilenet_v2",
        ("mobilenetv2", "mobilenet"),
        Family.CNN,
        3.5e6,
        "imagenet",
        _cnn(0.30e9, 0.09e9),
        "torchvision docs",
    ),
    ModelInfo(
        "shufflenet_v2",
        ("shufflenetv2", "shufflenet"),
        Family.CNN,
        2.3e6,
        "imagenet",
        # torchvision x1.0: 2.28M params, 0.14 G multiply-adds; CIFAR-100 variant ~0.045 G (estimate).
        _cnn(0.14e9, 0.045e9),
        "torchvision docs; Ma et al. 2018; Zeus NSDI'23 workload",
    ),
    ModelInfo(
        "bert",
        ("bert-base", "bert-base-uncased", "bert_base_uncased", "bertbase"),
        Family.TRANSFORMER,
        110e6,
        "squad",
        # BERT-base: 110M params of which ~85M outside the embeddings; 12 layers, d=768.
        {
            "squad": _tokens(85e6, 12, 768, 384),
            "sentiment140": _tokens(85e6, 12, 768, 128),
            "wikitext-2": _tokens(85e6, 12, 768, 128),
        },
        "Devlin et al. 2019 (estimate by 6NT)",
    ),
    ModelInfo(
        "bert-large",
        ("bertlarge", "bert-large-uncased"),
        Family.TRANSFORMER,
        340e6,
        "squad",
        {"squad": _tokens(302e6, 24, 1024, 384), "sentiment140": _tokens(302e6, 24, 1024, 128)},
        "Devlin et al. 2019 (estimate by 6NT)",
    ),
    ModelInfo(
        "gpt2",
        ("gpt-2", "gpt2-small", "gpt2small"),
        Family.TRANSFORMER,
        124e6,
        "openwebtext",
        {"openwebtext": _tokens(85e6, 12, 768, 1024), "wikitext-2": _tokens(85e6, 12, 768, 1024)},
        "Radford et al. 2019 (estimate by 6NT, 1024-token samples)",
    ),
    ModelInfo(
        "gpt2-medium",
        ("gpt2medium",),
        Family.TRANSFORMER,
        355e6,
        "openwebtext",
        {"openwebtext": _tokens(302e6, 24, 1024, 1024)},
        "Radford et al. 2019 (estimate by 6NT)",
    ),
    ModelInfo(
        "transformer",
        ("transformer-base", "transformerbase", "nmt"),
        Family.TRANSFORMER,
        65e6,
        "multi30k",
        # Transformer-base (Vaswani et al. 2017): 65M params, ~44M outside the embeddings; a Multi30k
        # sentence pair is ~30 tokens per side (Gavel's translation job), WMT ~ 30 as well.
        {"multi30k": 6.0 * 44e6 * 60, "wmt16": 6.0 * 44e6 * 60},
        "Vaswani et al. 2017; Gavel job table (estimate)",
    ),
    ModelInfo(
        "lstm",
        ("lm", "lstm-lm", "lstmlm", "languagemodel", "wordlm"),
        Family.RNN,
        13.6e6,
        "wikitext-2",
        # PyTorch word_language_model (Gavel's LM job): 2-layer LSTM, 200 hidden, 33,278-word vocabulary:
        # 6.7M embedding + 6.7M decoder + 0.6M LSTM; a sample is a 35-token sequence.
        {"wikitext-2": 6.0 * (0.64e6 + 6.7e6) * 35},
        "pytorch/examples word_language_model; Gavel job table (estimate)",
    ),
    ModelInfo(
        "deepspeech2",
        ("deepspeech", "ds2", "deep-speech-2"),
        Family.RNN,
        38e6,
        "librispeech",
        # ~600 time steps per utterance after the stride-2 convolutions (12 s average LibriSpeech
        # utterance at 100 frames/s): 6 x 38M x 600.
        {"librispeech": 6.0 * 38e6 * 600},
        "Amodei et al. 2016; Pollux and Zeus workloads (estimate)",
    ),
    ModelInfo(
        "yolov3",
        ("yolo", "yolo-v3"),
        Family.DETECTION,
        61.9e6,
        "voc",
        # Darknet reports 65.9 BFLOPs (multiply-add = 2) forward at 416x416.
        {"voc": 3.0 * 65.9e9},
        "Redmon & Farhadi 2018",
    ),
    ModelInfo(
        "ncf",
        ("neumf", "neural-cf"),
        Family.RECSYS,
        5.0e6,
        "movielens-20m",
        # NeuMF: embeddings dominate the parameters (ML-20M: 138k users + 27k items x 64 dims); the dense
        # MLP per sample is ~40k multiply-adds.
        {"movielens-20m": 6.0 * 40e3, "movielens-1m": 6.0 * 40e3},
        "He et al. 2017 (estimate)",
    ),
    ModelInfo(
        "recommendation",
        ("recoder", "autoencoder", "autorec"),
        Family.RECSYS,
        27e6,
        "movielens-20m",
        # Gavel's Recommendation job: an autoencoder over the 26,744 ML-20M items with 512 hidden units.
        {"movielens-20m": 6.0 * 27e6},
        "Gavel job table (estimate)",
    ),
    ModelInfo(
        "cyclegan",
        ("cycle-gan",),
        Family.GAN,
        28.3e6,
        "monet2photo",
        # Two ResNet-9 generators (11.4M params, 56.9 G multiply-adds each at 256x256) and two PatchGAN
        # discriminators (2.8M, 3.2 G): per sample both generators run twice, discriminators four times.
        {"monet2photo": 3.0 * 2.0 * (4 * 56.9e9 + 4 * 3.2e9)},
        "Zhu et al. 2017 (estimate)",
    ),
    ModelInfo(
        "a3c",
        ("a3c-pong",),
        Family.RL,
        1.2e6,
        "pong",
        # Universe-starter-agent CNN+LSTM on 42x42 frames: ~20 M multiply-adds per step.
        {"pong": 6.0 * 20e6},
        "Mnih et al. 2016; Gavel job table (estimate)",
    ),
)

_MODEL_BY_KEY: dict[str, ModelInfo] = {}
for _m in MODELS:
    for _a in (_m.name, *_m.aliases):
        _MODEL_BY_KEY[_key(_a)] = _m


def lookup_model(name: str) -> ModelInfo | None:
    """The zoo entry for a model name in any usual spelling, or None when the zoo does not know it."""
    if not name:
        return None
    return _MODEL_BY_KEY.get(_key(name))


def canonical_model(name: str) -> str:
    """Canonical zoo name (``ResNet-50`` -> ``resnet50``); unknown names lower-cased and trimmed."""
    m = lookup_model(name)
    return m.name if m else name.strip().lower()


def model_names() -> list[str]:
    """Canonical names of every zoo model, sorted."""
    return sorted(m.name for m in MODELS)
