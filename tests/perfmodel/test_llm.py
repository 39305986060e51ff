"""LLM zoo entries (parameters, FLOPs per token), the sharding grammar, and the LLM scaling model."""

from __future__ import annotations

import itertools

import pytest

from perfmodel.errors import InvalidInputError
from perfmodel.features import HardwareFeatures, JobFeatures
from perfmodel.llm import LLMJobFeatures, is_llm_job, plan, predict, step_time
from perfmodel.llm_fit import FIT
from perfmodel.predictor import Predictor
from perfmodel.scaling import allreduce_latency_s
from perfmodel.sharding import Sharding, parse_sharding
from perfmodel.zoo import LLMS, llm_arch, lookup_model


@pytest.mark.parametrize("info", LLMS, ids=lambda m: m.name)
def test_parameter_count_matches_the_model_card(info: object) -> None:
    arch = llm_arch(info.name)  # type: ignore[attr-defined]
    assert arch is not None
    # within 1% of the card's figure (MPT-7B's card rounds 6.65B to 6.7B)
    assert arch.params_total == pytest.approx(arch.params_card, rel=0.01)


@pytest.mark.parametrize(
    ("model", "seq", "flops_per_token"),
    [
        # Llama 3 8B, L=32 h=4096 kv=1024 F=14336 V=128256 untied:
        #   layer = 2*4096^2 + 2*4096*1024 + 3*4096*14336 + 2*4096 = 218,112,000; x32 = 6,979,584,000
        #   N_matmul = layers + output head 525,336,576 + final norm 4096 = 7,504,924,672
        #   6 N = 45,029,548,032; attention 12*32*4096*4096 = 6,442,450,944 -> 51,471,998,976
        ("llama3-8b", 4096, 51_471_998_976.0),
        # the attention term doubles with the sequence: + 6,442,450,944 at 8192
        ("llama3-8b", 8192, 57_914_449_920.0),
        # MPT-7B, L=32 h=4096 F=16384 (GeLU) V=50432 tied: layer = 4*4096^2 + 2*4096*16384 + 2*4096
        #   = 201,334,784; x32 = 6,442,713,088 + shared embedding/head 206,569,472 + 4096 = 6,649,286,656
        #   6 N = 39,895,719,936; attention 12*32*4096*2048 = 3,221,225,472 -> 43,116,945,408
        ("mpt-7b", 2048, 43_116_945_408.0),
        # Mixtral 8x7B: 2 of 8 experts active: layer = 41,943,040 attention + 2*176,160,768 experts
        #   + 32,768 router + 8,192 norms = 394,305,536; x32 = 12,617,777,152 + head 131,072,000 + 4096
        #   = 12,748,853,248; 6 N = 76,493,119,488; attention at 4096 = 6,442,450,944 -> 82,935,570,432
        ("mixtral-8x7b", 4096, 82_935_570_432.0),
    ],
)
def test_flops_per_token_is_6n_plus_attention(model: str, seq: int, flops_per_token: float) -> None:
    arch = llm_arch(model)
    assert arch is not None
    assert arch.flops_per_token(seq) == pytest.approx(flops_per_token, rel=1e-9)


def test_mixtral_active_parameters() -> None:
    arch = llm_arch("Mixtral-8x7B-v0.1")
    assert arch is not None
    assert arch.params_total == pytest.approx(46.7e9, rel=0.005)
    assert arch.params_active == pytest.approx(12.9e9, rel=0.005)  # Jiang et al. 2024: 12.9B active


def test_llm_names_resolve_in_usual_spellings() -> None:
    for spelling, name in [
        ("LLAMA3_8B", "llama3-8b"),
        ("Meta-Llama-3-70B", "llama3-70b"),
        ("Qwen2.5-72B", "qwen2.5-72b"),
        ("GPT-NeoX-20B", "gpt-neox-20b"),
    ]:
        m = lookup_model(spelling)
        assert m is not None and m.name == name


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("ddp", Sharding("ddp")),
        ("fsdp", Sharding("fsdp")),
        ("", Sharding("fsdp")),
        ("ZeRO3", Sharding("fsdp")),
        ("zero-3", Sharding("fsdp")),
        ("tp4xpp2", Sharding("tp", 4, 2)),
        ("TP8xPP8xCP2", Sharding("tp", 8, 8, 2)),
        ("tp8", Sharding("tp", 8, 1)),
        ("pp4", Sharding("tp", 1, 4)),
    ],
)
def test_sharding_parses(text: str, want: Sharding) -> None:
    assert parse_sharding(text) == want


@pytest.mark.parametrize("text", ["tp0xpp2", "tp", "zero2", "tp4xpp", "fsdp2", "tp4 x pp2", "cp2", "xpp2"])
def test_sharding_that_does_not_parse_names_the_field(text: str) -> None:
    with pytest.raises(InvalidInputError, match=r"^sharding: cannot parse"):
        parse_sharding(text)


def test_model_parallel_degree_must_divide_the_gpus() -> None:
    job = LLMJobFeatures("llama3-70b", batch_size=64, precision="bf16", sharding="tp4xpp8")
    with pytest.raises(InvalidInputError, match=r"^sharding: .*32 GPUs; 16 GPUs"):
        plan(job, HardwareFeatures("H100", 16, 8, 2))
    assert plan(job, HardwareFeatures("H100", 64, 8, 8)).data_parallel == 2  # 64 / (4 x 8)


def test_bad_llm_input_names_the_field() -> None:
    with pytest.raises(InvalidInputError, match=r"^sequence_length: must be > 0"):
        plan(LLMJobFeatures("llama3-8b", batch_size=8, sequence_length=0), HardwareFeatures("H100", 8))
    with pytest.raises(InvalidInputError, match=r"^params: an LLM needs a parameter count"):
        plan(LLMJobFeatures("my-llm", batch_size=8, sequence_length=2048), HardwareFeatures("H100", 8))


def test_llm_rows_go_to_the_llm_model_and_others_to_the_learned_one() -> None:
    p = Predictor.load()
    llm_row = (
        LLMJobFeatures("llama3-8b", batch_size=64, precision="bf16", sequence_length=4096),
        HardwareFeatures("H100", 8),
    )
    cnn_row = (JobFeatures("resnet50", batch_size=256), HardwareFeatures("V100", 4))
    assert is_llm_job(llm_row[0]) and is_llm_job(JobFeatures("llama3-8b", batch_size=8))
    assert not is_llm_job(cnn_row[0])
    mixed = p.predict([cnn_row, llm_row])
    assert mixed.samples_per_s[0] == p.predict([cnn_row]).samples_per_s[0]
    assert mixed.samples_per_s[1] == predict([llm_row]).samples_per_s[0]
    assert mixed.low[1] < mixed.samples_per_s[1] < mixed.high[1]


def test_every_llm_foundry_mpt_size_is_an_llm_job_with_the_shape_its_runs_trained() -> None:
    """llm-foundry's MPT 125M-70B rows are answered by the LLM scaling model, not the learned one (which
    reads them 1.9-2.8x too fast with the source held out: docs/decisions/0125), and the zoo's shape for
    each size gives the parameter count the benchmark table states, less its learned position embedding."""
    from importlib import resources
    from pathlib import Path

    from perfmodel.llm import question_of
    from perfmodel.measurements import read_table

    table = read_table(Path(str(resources.files("perfmodel") / "data" / "measurements.csv.gz")))
    rows = [m for m in table if m.source.split("+")[0] == "llm_foundry"]
    assert {m.model for m in rows} >= {f"mpt-{s}" for s in ("125m", "350m", "760m", "1b", "3b", "13b", "70b")}
    for m in rows:
        job, _ = question_of(m)
        assert isinstance(job, LLMJobFeatures) and is_llm_job(job), m.model
        arch = llm_arch(m.model)
        assert arch is not None
        assert arch.params_total == pytest.approx(m.params - m.seq_len * arch.hidden, rel=0.002), m.model


def test_scaling_model_physics() -> None:
    def tokens_per_s(job: LLMJobFeatures, hw: HardwareFeatures) -> float:
        pl = plan(job, hw)
        return pl.tokens_per_step / step_time(pl).total

    job = LLMJobFeatures("llama3-8b", batch_size=64, precision="bf16", sequence_length=4096, micro_batch=2)
    h100, a100 = HardwareFeatures("H100", 8), HardwareFeatures("A100-SXM4-80GB", 8)
    # an H100 has 3.2x an A100's BF16 peak and 1.6x its bandwidth: between those, and MFU in 25-65%
    assert 1.6 < tokens_per_s(job, h100) / tokens_per_s(job, a100) < 3.2
    pl = plan(job, h100)
    mfu = tokens_per_s(job, h100) * pl.flops_per_token / (8 * 989e12)
    assert 0.25 < mfu < 0.65
    # activation checkpointing recomputes the forward: slower by at most 4/3
    ac = LLMJobFeatures(
        "llama3-8b",
        batch_size=64,
        precision="bf16",
        sequence_length=4096,
        micro_batch=2,
        activation_checkpointing=True,
    )
    assert tokens_per_s(ac, h100) == pytest.approx(tokens_per_s(job, h100) * 3 / 4, rel=0.05)
    # a pipeline with few micro-batches idles: tp1xpp8 on 8 GPUs with 8 micro-batches has a 7/8 bubble
    pp = LLMJobFeatures("llama3-8b", batch_size=8, precision="bf16", sequence_length=4096, sharding="pp8")
    st = step_time(plan(pp, h100))
    assert st.bubble == pytest.approx(st.compute * 7 / 8)
    # across nodes on a slow network, FSDP's parameter traffic dominates
    slow = HardwareFeatures("H100", 16, 8, 2, "nvlink", 25.0)
    assert step_time(plan(job, slow)).data_parallel > step_time(plan(job, slow)).compute


@pytest.mark.parametrize("model", ["llama3-8b", "mixtral-8x7b", "mpt-7b"])
@pytest.mark.parametrize("gpu", ["NVIDIA-H100-80GB-HBM3", "A100-SXM4-80GB"])
def test_more_nvlink_gpus_of_one_node_never_predict_fewer_tokens(model: str, gpu: str) -> None:
    # same global batch (64 sequences of 2048 tokens), FSDP over 1..8 GPUs of one node
    rows = [
        (
            LLMJobFeatures(model, batch_size=64, precision="bf16", sequence_length=2048),
            HardwareFeatures(gpu, n),
        )
        for n in range(1, 9)
    ]
    s = predict(rows).samples_per_s
    assert all(b >= a for a, b in itertools.pairwise(s)), s


def test_fsdp_over_pcie_is_bound_by_the_parameter_traffic() -> None:
    # Mixtral's 46.7e9 parameters: FSDP moves 3 x 7/8 x 2 B x 46.7e9 = 245 GB per step per GPU over
    # PCIe 4 (31.5 GB/s at the fitted link efficiency): 7.8 s / efficiency, more than the compute of
    # 64 x 2048 tokens on 8 L40S
    job = LLMJobFeatures("mixtral-8x7b", batch_size=64, precision="bf16", sequence_length=2048)
    st = step_time(plan(job, HardwareFeatures("L40S", 8)))
    want = 3 * 7 / 8 * 2 * 46.703e9 / (31.5e9 * FIT.link_efficiency)
    assert st.data_parallel == pytest.approx(want, rel=1e-3)
    assert st.total == st.data_parallel > st.compute


def test_predict_each_gives_bad_llm_rows_their_own_error() -> None:
    p = Predictor.load()
    good = (LLMJobFeatures("llama3-8b", batch_size=64, precision="bf16"), HardwareFeatures("H100", 8))
    bad = (LLMJobFeatures("llama3-8b", batch_size=64, sharding="tp4xpp4"), HardwareFeatures("H100", 8))
    cnn = (JobFeatures("resnet50", batch_size=64), HardwareFeatures("V100", 2))
    out = p.predict_each([good, bad, cnn])
    assert not isinstance(out[0], InvalidInputError) and out[0].samples_per_s[0] > 0
    assert isinstance(out[1], InvalidInputError) and str(out[1]).startswith("sharding: tp4xpp4 splits")
    assert not isinstance(out[2], InvalidInputError)
    with pytest.raises(InvalidInputError, match=r"^row 1: sharding: tp4xpp4"):
        p.predict([good, bad, cnn])


def test_tensor_parallel_all_reduces_pay_their_latency_per_call() -> None:
    # tp8 inside an H100 node, one sequence of 128 tokens per micro-batch: each of the 4 all-reduces per
    # layer moves 7/8 x 2 x 128 x 8,192 x 2 bytes (3.7 MB, ~12 us over NVLink) and pays NCCL's latency
    # over 8 GPUs (a base and 14 in-node hops, ~64 us): latency, not bandwidth, is most of the TP time
    job = LLMJobFeatures(
        "llama3-70b", batch_size=8, precision="bf16", sequence_length=128, sharding="tp8", micro_batch=1
    )
    p = plan(job, HardwareFeatures("H100", 8))
    calls = 4 * p.arch.layers * p.grad_accumulation
    latency = allreduce_latency_s(8)
    assert 50e-6 < latency < 100e-6
    tp = step_time(p).tensor_parallel
    assert calls * latency < tp < 2.0 * calls * latency
