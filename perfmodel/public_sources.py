"""Where the public throughput extracts come from, and the helpers their parsers share.

``COMMITS`` / ``REPOS``: the repository and commit each source's extract was checked against (recorded on
every row); ``number`` reads a table cell's leading number (``1,234``, ``5.6K``, ``7M``);
``sequence_flops`` is the training FLOPs of one transformer sequence. Pure.
"""

from __future__ import annotations

import re

COMMITS = {
    "nvidia_dle": "729963dd47e7c8bd462ad10bfac7a7b0b604e6dd",
    "neusight": "6945927d9afcca2b9daf021f8395e53edc5b4eef",
    "llm_foundry": "c90b9b312c644dbde5c9e6eef75c6f1c117d8782",
    "megatron_bridge": "df0289c180dd20ff26933455c7a0a11084f6a36f",
    "mlperf": "",
}


REPOS = {
    "nvidia_dle": "NVIDIA/DeepLearningExamples",
    "neusight": "sitar-lab/NeuSight",
    "llm_foundry": "mosaicml/llm-foundry",
    "megatron_bridge": "NVIDIA-NeMo/Megatron-Bridge",
}


def sequence_flops(non_embedding_params: float, layers: int, d_model: int, seq: int) -> float:
    """Training FLOPs of one sequence: 6 N T plus 12 L T^2 d for attention (Kaplan et al. 2020)."""
    return 6.0 * non_embedding_params * seq + 12.0 * layers * seq * seq * d_model


_NUM = re.compile(r"^\s*([0-9][0-9,]*\.?[0-9]*)\s*([KM]?)")


def number(text: str) -> float | None:
    m = _NUM.match(text.replace("*", ""))
    if not m:
        return None
    try:
        v = float(m.group(1).replace(",", ""))
    except ValueError:
        return None
    return v * {"": 1.0, "K": 1e3, "M": 1e6}[m.group(2)]
