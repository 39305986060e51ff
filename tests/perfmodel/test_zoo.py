"""Zoo names are spelling-insensitive and the dataset changes the work per sample."""

from __future__ import annotations

import pytest

from perfmodel.datasets import canonical_dataset
from perfmodel.zoo import lookup_model, model_names


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("resnet50", "resnet50"),
        ("resnet-50", "resnet50"),
        ("ResNet-50", "resnet50"),
        ("RESNET_50", "resnet50"),
        ("ResNet-18", "resnet18"),
        ("bert-base-uncased", "bert"),
        ("bert_base_uncased", "bert"),
        ("GPT-2", "gpt2"),
        ("Inception-v3", "inception_v3"),
        ("VGG-16", "vgg16"),
        ("DeepSpeech2", "deepspeech2"),
        ("YOLOv3", "yolov3"),
        ("LM", "lstm"),
        ("CycleGAN", "cyclegan"),
        ("A3C", "a3c"),
        ("NCF", "ncf"),
        ("Transformer", "transformer"),
    ],
)
def test_aliases(name: str, canonical: str) -> None:
    m = lookup_model(name)
    assert m is not None and m.name == canonical


def test_unknown_model_is_none() -> None:
    assert lookup_model("resnet51") is None
    assert lookup_model("") is None


def test_resnet18_on_cifar10_is_not_resnet18_on_imagenet() -> None:
    m = lookup_model("resnet18")
    assert m is not None
    # torchvision 1.81 G multiply-adds at 224x224 vs 0.56 G for the CIFAR variant at 32x32:
    # 6 x 1.81e9 = 10.86e9 and 6 x 0.56e9 = 3.36e9 training FLOPs per sample, a ratio of ~3.2
    assert m.flops_on("imagenet") == pytest.approx(10.86e9)
    assert m.flops_on("CIFAR-10") == pytest.approx(3.36e9)
    assert m.flops_on("") == m.flops_on("imagenet")  # default dataset


def test_dataset_spellings() -> None:
    assert canonical_dataset("CIFAR-10") == "cifar10"
    assert canonical_dataset("ImageNet") == "imagenet"
    assert canonical_dataset("ml-1m") == "movielens-1m"
    assert canonical_dataset("MyData") == "mydata"


def test_issue_models_are_in_the_zoo() -> None:
    names = set(model_names())
    for required in (
        "resnet18",
        "resnet50",
        "vgg16",
        "inception_v3",
        "bert",
        "gpt2",
        "transformer",
        "lstm",
        "deepspeech2",
        "yolov3",
        "ncf",
        "cyclegan",
        "a3c",
    ):
        assert required in names
    for m in names:
        info = lookup_model(m)
        assert info is not None and info.params > 0 and info.flops_on("") > 0
