"""Model zoo: features of common training workloads (parameters, training FLOPs per sample).

A TrainingJob names a model (``resnet50``) or gives ``parameters`` and ``flopsPerSample`` directly. The
zoo turns a name, in any usual spelling (``resnet50``, ``resnet-50``, ``ResNet-50``, ``resnet_50``), into
a ``ModelInfo`` and, together with the dataset (``perfmodel.datasets``), into the work one sample costs:
ResNet-18 on CIFAR-10 (32x32 images) is about 20x cheaper per sample than on ImageNet (224x224).

FLOPs are training FLOPs per sample, counted as 3 x forward (forward + backward ~ 2 x forward), with one
multiply-add = 2 FLOPs. Sources: torchvision model documentation (parameters and GFLOPS, which are
multiply-adds), the original papers, and the benchmark suites the measured tables come from (Gavel,
Pollux, Zeus). Figures marked "estimate" are derived from the architecture by the 6 x params x tokens
rule (Kaplan et al., 2020) or by layer counting and are good to a factor of ~1.5.

Large language models (``llama3-8b``, ``mixtral-8x7b``, ...) carry their architecture (``LLMArch``: layers,
hidden size, heads and KV heads, feed-forward size, vocabulary, experts) from the model card / config.json
each entry names. Their work per sample depends on the sequence length, so a sample is one sequence of the
job's ``sequenceLength`` tokens and ``LLMArch.flops_per_token(seq)`` is the model-FLOPs convention of the
MFU literature (PaLM, Chowdhery et al. 2022, appendix B; the same count as llm-foundry's MFU and, up to
the input-embedding lookup, as Narayanan et al. 2021's Megatron formula):

    training FLOPs per token = 6 x N_matmul + 12 x layers x hidden x seq

with ``N_matmul`` the parameters one token multiplies through (active experts only for a mixture of
experts; the input-embedding lookup is not a matmul, the output projection is) and the second term the
attention scores and the attention-weighted values (2 x 2 x seq x hidden per layer forward, x3 for forward
and backward; causal masking is not subtracted, as in the convention). Pure module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from perfmodel.datasets import canonical_dataset, name_key


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
class LLMArch:
    """A decoder-only transformer's shape, as its config.json states it.

    ``ffn`` is the feed-forward width of one expert; ``gated_mlp`` means three matrices (SwiGLU: gate, up,
    down) instead of two (GeLU: up, down); ``experts``/``experts_active`` describe a mixture of experts
    (top-k routing); ``tied_embeddings`` means the output projection reuses the input embedding.
    ``qkv_bias``/``linear_bias`` add the bias vectors (Qwen2.5 has QKV biases, GPT-NeoX biases everywhere).
    ``default_sequence`` is the sequence length a job without one is assumed to train at (the model's
    pre-training context where the card states it). ``params_card`` is the published parameter count
    (checked against ``params_total`` by the tests).
    """

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    default_sequence: int
    params_card: float
    gated_mlp: bool = True
    tied_embeddings: bool = False
    experts: int = 1
    experts_active: int = 1
    qkv_bias: bool = False
    linear_bias: bool = False
    layer_norm_bias: bool = False

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def _attention_params(self) -> float:
        h, kv = self.hidden, self.kv_dim
        w = 2.0 * h * h + 2.0 * h * kv  # q and o projections (h x h), k and v (h x kv)
        if self.qkv_bias or self.linear_bias:
            w += h + 2.0 * kv
        if self.linear_bias:
            w += h
        return w

    def _expert_params(self) -> float:
        mats = 3.0 if self.gated_mlp else 2.0
        w = mats * self.hidden * self.ffn
        if self.linear_bias:
            w += self.ffn + self.hidden
        return w

    def _norm_params(self) -> float:
        return (4.0 if self.layer_norm_bias else 2.0) * self.hidden  # two norms per layer

    def _layer_params(self, experts: int) -> float:
        router = float(self.hidden * self.experts) if self.experts > 1 else 0.0
        return self._attention_params() + experts * self._expert_params() + router + self._norm_params()

    @property
    def embedding_params(self) -> float:
        """Input embedding table (vocab x hidden)."""
        return float(self.vocab * self.hidden)

    @property
    def params_total(self) -> float:
        """Every parameter: layers (all experts), embeddings (the head once more unless tied), final norm."""
        head = 0.0 if self.tied_embeddings else self.embedding_params
        final_norm = (2.0 if self.layer_norm_bias else 1.0) * self.hidden
        return self.layers * self._layer_params(self.experts) + self.embedding_params + head + final_norm

    @property
    def params_active(self) -> float:
        """Parameters one token uses (``experts_active`` of the experts)."""
        return self.params_total - self.layers * (self.experts - self.experts_active) * self._expert_params()

    @property
    def matmul_params(self) -> float:
        """Parameters one token multiplies through: the active ones without the input-embedding lookup
        (with tied embeddings the shared matrix is the output projection, so it stays)."""
        return self.params_active - (0.0 if self.tied_embeddings else self.embedding_params)

    def flops_per_token(self, seq: int) -> float:
        """Training FLOPs per token at sequence length ``seq``: 6 N_matmul + 12 L h seq (module docstring)."""
        return 6.0 * self.matmul_params + 12.0 * self.layers * self.hidden * seq

    def flops_per_sequence(self, seq: int) -> float:
        """Training FLOPs of one sample (one sequence of ``seq`` tokens)."""
        return seq * self.flops_per_token(seq)


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
    llm: LLMArch | None = None

    def flops_on(self, dataset: str = "") -> float:
        """Training FLOPs per sample on ``dataset`` (its canonical name); the default dataset otherwise."""
        ds = canonical_dataset(dataset) if dataset else self.default_dataset
        if ds in self.flops_per_sample:
            return self.flops_per_sample[ds]
        return self.flops_per_sample[self.default_dataset]


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
        # 85M in the blocks plus the LM head's 768 x 50,257 projection (tied to the input embedding, but a
        # matmul every token): 123.6M matmul parameters, as ``perfmodel.profiling.profile_zoo`` counts.
        {"openwebtext": _tokens(123.6e6, 12, 768, 1024), "wikitext-2": _tokens(123.6e6, 12, 768, 1024)},
        "Radford et al. 2019 (6NT with the LM head, 1024-token samples)",
    ),
    ModelInfo(
        "gpt2-medium",
        ("gpt2medium",),
        Family.TRANSFORMER,
        355e6,
        "openwebtext",
        # 302M in the blocks plus the 1,024 x 50,257 LM head (51.5M).
        {"openwebtext": _tokens(353.5e6, 24, 1024, 1024)},
        "Radford et al. 2019 (6NT with the LM head)",
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
        # The gradient the measured NCF runs synchronise, not the architecture's 31.8M: NeuMF's ML-20M
        # tables (138,493 users + 26,744 items, a 64-dim GMF and a 128-dim MLP table each) as a dense
        # 127 MB all-reduce leave the scaling model's in-sample error on the table's 3,900 multi-GPU NCF
        # rows twice as large (median |log error| 0.80 -> 1.66; decision 0107). The operator profile
        # (``perfmodel.profiling.profile_zoo``) carries the 31.8M.
        5.0e6,
        "movielens-20m",
        # The dense MLP per sample is ~41k multiply-adds: 247k FLOPs forward + backward as the layer table
        # counts them.
        {"movielens-20m": 247.3e3, "movielens-1m": 247.3e3},
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
        0.59e6,
        "pong",
        # pytorch-a3c's ActorCritic on 42x42 frames: four 3x3/2 convolutions of 32, an LSTM cell of 256 and
        # two heads: 0.59M parameters and 2.2M multiply-adds forward, counted forward + backward by
        # ``perfmodel.profiling.profile_zoo("a3c")`` (13.1 MFLOPs per sample).
        {"pong": 13.1e6},
        "Mnih et al. 2016; ikostrikov/pytorch-a3c (Gavel's A3C job), counted from its layers",
    ),
)


def _llm(name: str, aliases: tuple[str, ...], arch: LLMArch, source: str) -> ModelInfo:
    """A zoo LLM: a sample is one sequence of ``default_sequence`` tokens of the ``text`` dataset."""
    return ModelInfo(
        name,
        aliases,
        Family.TRANSFORMER,
        arch.params_total,
        "text",
        {"text": arch.flops_per_sequence(arch.default_sequence)},
        source,
        llm=arch,
    )


# Decoder-only LLMs people train and fine-tune now. Shapes from each model's config.json on its Hugging
# Face model card (facts: num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads,
# intermediate_size, vocab_size, tie_word_embeddings, experts); ``params_card`` is the card's / paper's
# parameter count. ``default_sequence``: the pre-training sequence length for MPT and GPT-NeoX (2048),
# else 4096 (shorter than the longest context these models support; a job training longer sequences
# says so in ``sequenceLength``).
# MosaicML's MPT family as llm-foundry trains and benchmarks it (Apache-2.0):
# ``scripts/train/yamls/pretrain/<name>.yaml`` (d_model, n_layers, n_heads, expansion_ratio 4, GeLU MLP,
# tied embeddings, 2048-token sequences) and ``scripts/train/benchmarking/README.md``, whose parameter count
# at 2048 tokens, less its 2048 x hidden learned position embedding, is ``params_card``.
_MPT_SOURCE = "llm-foundry scripts/train/yamls/pretrain/{}.yaml; benchmarking README's parameter count"

LLMS: tuple[ModelInfo, ...] = (
    _llm(
        "llama3-8b",
        (
            "llama-3-8b",
            "meta-llama-3-8b",
            "llama3.1-8b",
            "llama-3.1-8b",
            "meta-llama-3.1-8b",
            "llama3-8b-instruct",
        ),
        LLMArch(32, 4096, 32, 8, 14336, 128256, 4096, 8.03e9),
        "meta-llama/Meta-Llama-3-8B config.json and model card (8.03B); Llama 3.1 8B has the same shape",
    ),
    _llm(
        "llama3-70b",
        ("llama-3-70b", "meta-llama-3-70b", "llama3.1-70b", "llama-3.1-70b", "meta-llama-3.1-70b"),
        LLMArch(80, 8192, 64, 8, 28672, 128256, 4096, 70.6e9),
        "meta-llama/Meta-Llama-3-70B config.json and model card (70.6B); Llama 3.1 70B has the same shape",
    ),
    _llm(
        "mistral-7b",
        ("mistral-7b-v0.1", "mistral-7b-v0.3", "mistral-7b-instruct"),
        # v0.3 extends the vocabulary to 32768 (+2.9M parameters): below the 1% this entry is good to.
        LLMArch(32, 4096, 32, 8, 14336, 32000, 4096, 7.24e9),
        "mistralai/Mistral-7B-v0.1 config.json; Jiang et al. 2023 (7.24B)",
    ),
    _llm(
        "mixtral-8x7b",
        ("mixtral-8x7b-v0.1", "mixtral", "mixtral-8x7b-instruct"),
        LLMArch(32, 4096, 32, 8, 14336, 32000, 4096, 46.7e9, experts=8, experts_active=2),
        "mistralai/Mixtral-8x7B-v0.1 config.json; Jiang et al. 2024 (46.7B total, 12.9B active per token)",
    ),
    _llm(
        "qwen2.5-7b",
        ("qwen2.5-7b-instruct", "qwen-2.5-7b"),
        LLMArch(28, 3584, 28, 4, 18944, 152064, 4096, 7.61e9, qkv_bias=True),
        "Qwen/Qwen2.5-7B config.json and model card (7.61B)",
    ),
    _llm(
        "qwen2.5-72b",
        ("qwen2.5-72b-instruct", "qwen-2.5-72b"),
        LLMArch(80, 8192, 64, 8, 29568, 152064, 4096, 72.7e9, qkv_bias=True),
        "Qwen/Qwen2.5-72B config.json and model card (72.7B)",
    ),
    _llm(
        "mpt-125m",
        ("mosaicml-mpt-125m",),
        LLMArch(12, 768, 12, 12, 3072, 50432, 2048, 0.1237e9, gated_mlp=False, tied_embeddings=True),
        _MPT_SOURCE.format("mpt-125m"),
    ),
    _llm(
        "mpt-350m",
        ("mosaicml-mpt-350m",),
        LLMArch(24, 1024, 16, 16, 4096, 50432, 2048, 0.3539e9, gated_mlp=False, tied_embeddings=True),
        _MPT_SOURCE.format("mpt-350m"),
    ),
    _llm(
        "mpt-760m",
        ("mosaicml-mpt-760m",),
        LLMArch(24, 1536, 12, 12, 6144, 50432, 2048, 0.7573e9, gated_mlp=False, tied_embeddings=True),
        _MPT_SOURCE.format("mpt-760m"),
    ),
    _llm(
        "mpt-1b",
        ("mosaicml-mpt-1b",),
        LLMArch(24, 2048, 16, 16, 8192, 50432, 2048, 1.312e9, gated_mlp=False, tied_embeddings=True),
        _MPT_SOURCE.format("mpt-1b"),
    ),
    _llm(
        "mpt-3b",
        ("mosaicml-mpt-3b",),
        LLMArch(32, 2560, 20, 20, 10240, 50432, 2048, 2.647e9, gated_mlp=False, tied_embeddings=True),
        _MPT_SOURCE.format("mpt-3b"),
    ),
    _llm(
        "mpt-7b",
        ("mosaicml-mpt-7b", "mpt-7b-base"),
        # expansion_ratio 4 (GeLU MLP, two matrices), no biases, tied embeddings, 2048-token pre-training.
        LLMArch(32, 4096, 32, 32, 16384, 50432, 2048, 6.7e9, gated_mlp=False, tied_embeddings=True),
        "mosaicml/mpt-7b config.json and model card (6.7B); llm-foundry yamls/pretrain/mpt-7b.yaml",
    ),
    _llm(
        "mpt-30b",
        ("mosaicml-mpt-30b",),
        LLMArch(48, 7168, 64, 64, 28672, 50432, 2048, 29.96e9, gated_mlp=False, tied_embeddings=True),
        "mosaicml/mpt-30b config.json and model card (30B); llm-foundry benchmark table (29.96B at 2048)",
    ),
    _llm(
        "mpt-13b",
        ("mosaicml-mpt-13b",),
        LLMArch(40, 5120, 40, 40, 20480, 50432, 2048, 12.84e9, gated_mlp=False, tied_embeddings=True),
        _MPT_SOURCE.format("mpt-13b"),
    ),
    _llm(
        "mpt-70b",
        ("mosaicml-mpt-70b",),
        LLMArch(80, 8192, 64, 64, 32768, 50432, 2048, 64.85e9, gated_mlp=False, tied_embeddings=True),
        _MPT_SOURCE.format("mpt-70b"),
    ),
    _llm(
        "gpt-neox-20b",
        ("gptneox-20b", "neox-20b", "eleutherai-gpt-neox-20b"),
        LLMArch(
            44,
            6144,
            64,
            64,
            24576,
            50432,
            2048,
            20.55e9,
            gated_mlp=False,
            linear_bias=True,
            layer_norm_bias=True,
        ),
        "EleutherAI/gpt-neox-20b config.json; Black et al. 2022 (20.55B)",
    ),
)
MODELS = MODELS + LLMS

_MODEL_BY_KEY: dict[str, ModelInfo] = {}
for _m in MODELS:
    for _a in (_m.name, *_m.aliases):
        _MODEL_BY_KEY[name_key(_a)] = _m


def lookup_model(name: str) -> ModelInfo | None:
    """The zoo entry for a model name in any usual spelling, or None when the zoo does not know it."""
    if not name:
        return None
    return _MODEL_BY_KEY.get(name_key(name))


def canonical_model(name: str) -> str:
    """Canonical zoo name (``ResNet-50`` -> ``resnet50``); unknown names lower-cased and trimmed."""
    m = lookup_model(name)
    return m.name if m else name.strip().lower()


def llm_arch(name: str) -> LLMArch | None:
    """The architecture of a zoo LLM (any spelling), or None for a model that is not a zoo LLM."""
    m = lookup_model(name)
    return m.llm if m is not None else None


def model_names() -> list[str]:
    """Canonical names of every zoo model, sorted."""
    return sorted(m.name for m in MODELS)
