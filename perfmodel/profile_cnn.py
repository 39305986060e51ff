"""Layer tables of the zoo's convolutional and small models, written against ``profile_net.Net``.

Each function builds one training step of one model the way its reference implementation defines it
(torchvision's ResNet, VGG, MobileNetV2, ShuffleNetV2 and Inception v3; Darknet-53 YOLOv3; the CycleGAN
ResNet-9 generator and PatchGAN discriminator; the A3C agent of pytorch-a3c; the word-level LSTM of
pytorch/examples; DeepSpeech2 as deepspeech.pytorch lays it out; NeuMF; the Recoder autoencoder). The
source of every table is named in ``perfmodel.profile_zoo``. Pure module.
"""

from __future__ import annotations

from perfmodel.profile_net import Net
from perfmodel.profile_record import T

# ------------------------------------------------------------------ torchvision classifiers


def _cbr(
    net: Net,
    x: T,
    cout: int,
    k: int | tuple[int, int],
    s: int = 1,
    p: int | tuple[int, int] | None = None,
    name: str = "conv",
    act: str = "relu",
    groups: int = 1,
) -> T:
    """Convolution (no bias), batch norm, activation (``act=""``: none)."""
    with net.scope(name):
        y = net.bn(net.conv(x, cout, k, s, p, groups=groups, name="conv"), "bn")
        return net.act(y, act) if act else y


def resnet(
    net: Net, depth: int, classes: int = 1000, input_shape: tuple[int, int, int] = (3, 224, 224)
) -> None:
    """torchvision ResNet (v1.5: the stride on the 3x3 convolution of a bottleneck)."""
    blocks = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}[
        depth
    ]
    bottleneck = depth >= 50
    exp = 4 if bottleneck else 1
    x = net.input(input_shape)
    x = net.act(net.bn(net.conv(x, 64, 7, 2, 3, name="conv1"), "bn1"), "relu", "relu")
    x = net.pool(x, 3, 2, 1, name="maxpool")
    cin = 64
    for li, (n, width) in enumerate(zip(blocks, (64, 128, 256, 512), strict=True), start=1):
        for b in range(n):
            s = 2 if (b == 0 and li > 1) else 1
            with net.scope(f"layer{li}.{b}"):
                if bottleneck:
                    y = _cbr(net, x, width, 1, 1, 0, "1")
                    y = _cbr(net, y, width, 3, s, 1, "2")
                    y = _cbr(net, y, width * exp, 1, 1, 0, "3", act="")
                else:
                    y = _cbr(net, x, width, 3, s, 1, "1")
                    y = _cbr(net, y, width, 3, 1, 1, "2", act="")
                short = x
                if s != 1 or cin != width * exp:
                    short = _cbr(net, x, width * exp, 1, s, 0, "downsample", act="")
                x = net.act(net.add(y, short), "relu")
            cin = width * exp
    x = net.flatten(net.global_pool(x))
    net.cross_entropy(net.linear(x, classes, name="fc"))


def vgg16(net: Net, classes: int = 1000) -> None:
    """torchvision VGG-16 (configuration D, no batch norm)."""
    x = net.input((3, 224, 224))
    cfg = [64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0]
    with net.scope("features"):
        for i, c in enumerate(cfg):
            if c == 0:
                x = net.pool(x, 2, 2, name=f"pool{i}")
            else:
                x = net.act(net.conv(x, c, 3, 1, 1, bias=True, name=str(i)), "relu")
    x = net.flatten(net.reduce(x, x.shape, "_adaptive_avg_pool2d", "avgpool"))
    with net.scope("classifier"):
        for i, c in enumerate((4096, 4096)):
            x = net.dropout(net.act(net.linear(x, c, name=str(3 * i)), "relu"))
        net.cross_entropy(net.linear(x, classes, name="6"))


def mobilenet_v2(net: Net, classes: int = 1000) -> None:
    """torchvision MobileNetV2 (width 1.0)."""
    x = net.input((3, 224, 224))
    x = _cbr(net, x, 32, 3, 2, 1, "features.0", act="hardtanh")
    cin = 32
    idx = 1
    for t, c, n, s in (
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ):
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            with net.scope(f"features.{idx}"):
                y = x
                if t != 1:
                    y = _cbr(net, y, hidden, 1, 1, 0, "expand", act="hardtanh")
                y = _cbr(net, y, hidden, 3, stride, 1, "dw", act="hardtanh", groups=hidden)
                y = _cbr(net, y, c, 1, 1, 0, "project", act="")
                x = net.add(x, y) if (stride == 1 and cin == c) else y
            cin = c
            idx += 1
    x = _cbr(net, x, 1280, 1, 1, 0, "features.18", act="hardtanh")
    x = net.flatten(net.global_pool(x))
    net.cross_entropy(net.linear(net.dropout(x), classes, name="classifier.1"))


def shufflenet_v2(net: Net, classes: int = 1000) -> None:
    """torchvision ShuffleNetV2 x1.0."""
    x = net.input((3, 224, 224))
    x = _cbr(net, x, 24, 3, 2, 1, "conv1")
    x = net.pool(x, 3, 2, 1, name="maxpool")
    cin = 24
    for si, (reps, cout) in enumerate(zip((4, 8, 4), (116, 232, 464), strict=True), start=2):
        bf = cout // 2
        for r in range(reps):
            with net.scope(f"stage{si}.{r}"):
                if r == 0:
                    b1 = _cbr(net, x, cin, 3, 2, 1, "branch1.0", act="", groups=cin)
                    b1 = _cbr(net, b1, bf, 1, 1, 0, "branch1.2")
                    b2 = _cbr(net, x, bf, 1, 1, 0, "branch2.0")
                else:
                    b1 = T((*x.shape[:1], bf, *x.shape[2:]), x.grad)  # chunk: a view
                    b2 = _cbr(net, T(b1.shape, x.grad), bf, 1, 1, 0, "branch2.0")
                b2 = _cbr(net, b2, bf, 3, 2 if r == 0 else 1, 1, "branch2.3", act="", groups=bf)
                b2 = _cbr(net, b2, bf, 1, 1, 0, "branch2.5")
                x = net.copy(net.cat([b1, b2]), "channel_shuffle")
            cin = cout
    x = _cbr(net, x, 1024, 1, 1, 0, "conv5")
    x = net.reduce(x, x.shape[:2], "mean", "mean")
    net.cross_entropy(net.linear(x, classes, name="fc"))


def _inc_a(net: Net, x: T, pf: int) -> T:
    b1 = _cbr(net, x, 64, 1, name="branch1x1")
    b5 = _cbr(net, _cbr(net, x, 48, 1, name="branch5x5_1"), 64, 5, p=2, name="branch5x5_2")
    b3 = _cbr(net, x, 64, 1, name="branch3x3dbl_1")
    b3 = _cbr(net, _cbr(net, b3, 96, 3, p=1, name="branch3x3dbl_2"), 96, 3, p=1, name="branch3x3dbl_3")
    bp = _cbr(net, net.pool(x, 3, 1, 1, "avg", "avg_pool"), pf, 1, name="branch_pool")
    return net.cat([b1, b5, b3, bp])


def _inc_b(net: Net, x: T) -> T:
    b3 = _cbr(net, x, 384, 3, 2, 0, "branch3x3")
    d = _cbr(net, _cbr(net, x, 64, 1, name="branch3x3dbl_1"), 96, 3, p=1, name="branch3x3dbl_2")
    d = _cbr(net, d, 96, 3, 2, 0, "branch3x3dbl_3")
    return net.cat([b3, d, net.pool(x, 3, 2, name="max_pool")])


def _inc_c(net: Net, x: T, c7: int) -> T:
    b1 = _cbr(net, x, 192, 1, name="branch1x1")
    b7 = _cbr(net, x, c7, 1, name="branch7x7_1")
    b7 = _cbr(
        net,
        _cbr(net, b7, c7, (1, 7), p=(0, 3), name="branch7x7_2"),
        192,
        (7, 1),
        p=(3, 0),
        name="branch7x7_3",
    )
    d = _cbr(net, x, c7, 1, name="branch7x7dbl_1")
    for i, (k, p, c) in enumerate(
        (((7, 1), (3, 0), c7), ((1, 7), (0, 3), c7), ((7, 1), (3, 0), c7), ((1, 7), (0, 3), 192)), 2
    ):
        d = _cbr(net, d, c, k, p=p, name=f"branch7x7dbl_{i}")
    bp = _cbr(net, net.pool(x, 3, 1, 1, "avg", "avg_pool"), 192, 1, name="branch_pool")
    return net.cat([b1, b7, d, bp])


def _inc_d(net: Net, x: T) -> T:
    b3 = _cbr(net, _cbr(net, x, 192, 1, name="branch3x3_1"), 320, 3, 2, 0, "branch3x3_2")
    b7 = _cbr(net, x, 192, 1, name="branch7x7x3_1")
    b7 = _cbr(
        net,
        _cbr(net, b7, 192, (1, 7), p=(0, 3), name="branch7x7x3_2"),
        192,
        (7, 1),
        p=(3, 0),
        name="branch7x7x3_3",
    )
    b7 = _cbr(net, b7, 192, 3, 2, 0, "branch7x7x3_4")
    return net.cat([b3, b7, net.pool(x, 3, 2, name="max_pool")])


def _inc_e(net: Net, x: T) -> T:
    b1 = _cbr(net, x, 320, 1, name="branch1x1")
    b3 = _cbr(net, x, 384, 1, name="branch3x3_1")
    b3 = net.cat(
        [
            _cbr(net, b3, 384, (1, 3), p=(0, 1), name="branch3x3_2a"),
            _cbr(net, b3, 384, (3, 1), p=(1, 0), name="branch3x3_2b"),
        ]
    )
    d = _cbr(net, _cbr(net, x, 448, 1, name="branch3x3dbl_1"), 384, 3, p=1, name="branch3x3dbl_2")
    d = net.cat(
        [
            _cbr(net, d, 384, (1, 3), p=(0, 1), name="branch3x3dbl_3a"),
            _cbr(net, d, 384, (3, 1), p=(1, 0), name="branch3x3dbl_3b"),
        ]
    )
    bp = _cbr(net, net.pool(x, 3, 1, 1, "avg", "avg_pool"), 192, 1, name="branch_pool")
    return net.cat([b1, b3, d, bp])


def inception_v3(net: Net, classes: int = 1000) -> None:
    """torchvision Inception v3 at 299x299, with the auxiliary classifier it trains with."""
    x = net.input((3, 299, 299))
    x = _cbr(net, x, 32, 3, 2, 0, "Conv2d_1a_3x3")
    x = _cbr(net, x, 32, 3, 1, 0, "Conv2d_2a_3x3")
    x = _cbr(net, x, 64, 3, 1, 1, "Conv2d_2b_3x3")
    x = net.pool(x, 3, 2, name="maxpool1")
    x = _cbr(net, x, 80, 1, 1, 0, "Conv2d_3b_1x1")
    x = _cbr(net, x, 192, 3, 1, 0, "Conv2d_4a_3x3")
    x = net.pool(x, 3, 2, name="maxpool2")
    for name, pf in (("Mixed_5b", 32), ("Mixed_5c", 64), ("Mixed_5d", 64)):
        with net.scope(name):
            x = _inc_a(net, x, pf)
    with net.scope("Mixed_6a"):
        x = _inc_b(net, x)
    for name, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        with net.scope(name):
            x = _inc_c(net, x, c7)
    with net.scope("AuxLogits"):
        a = _cbr(net, net.pool(x, 5, 3, 0, "avg", "avg_pool"), 128, 1, name="conv0")
        a = _cbr(net, a, 768, 5, 1, 0, "conv1")
        a = net.flatten(net.global_pool(a))
        net.cross_entropy(net.linear(a, classes, name="fc"), "aux_loss")
    with net.scope("Mixed_7a"):
        x = _inc_d(net, x)
    for name in ("Mixed_7b", "Mixed_7c"):
        with net.scope(name):
            x = _inc_e(net, x)
    x = net.dropout(net.flatten(net.global_pool(x)))
    net.cross_entropy(net.linear(x, classes, name="fc"))


# ------------------------------------------------------------------ detection, GAN, RL


def yolov3(net: Net, classes: int = 20) -> None:
    """YOLOv3 (Darknet-53 backbone and three detection scales) at 416x416, VOC's 20 classes."""
    out_ch = 3 * (5 + classes)
    x = net.input((3, 416, 416))

    def dconv(x: T, c: int, k: int, s: int = 1, name: str = "conv") -> T:
        return _cbr(net, x, c, k, s, k // 2 if s == 1 else 1, name, act="leaky_relu")

    x = dconv(x, 32, 3, name="conv0")
    routes = []
    for si, (c, n) in enumerate(((64, 1), (128, 2), (256, 8), (512, 8), (1024, 4))):
        with net.scope(f"stage{si}"):
            x = dconv(x, c, 3, 2, "down")
            for b in range(n):
                with net.scope(f"res{b}"):
                    y = dconv(dconv(x, c // 2, 1, name="1"), c, 3, name="2")
                    x = net.add(x, y)
        routes.append(x)
    for hi, c in enumerate((512, 256, 128)):
        with net.scope(f"head{hi}"):
            if hi > 0:
                x = dconv(x, c, 1, name="route")
                x = net.reduce(
                    x, (x.shape[0], c, x.shape[2] * 2, x.shape[3] * 2), "upsample_nearest2d", "upsample"
                )
                x = net.cat([x, routes[-1 - hi]])
            for i in range(5):
                x = dconv(x, c if i % 2 == 0 else 2 * c, 1 if i % 2 == 0 else 3, name=f"set{i}")
            y = dconv(x, 2 * c, 3, name="out0")
            y = net.conv(y, out_ch, 1, 1, 0, bias=True, name="out1")
            net.reduce(y, (), "mse_loss", "loss")


def _generator(net: Net, x: T, ngf: int = 64, blocks: int = 9) -> T:
    def cin(
        x: T,
        c: int,
        k: int,
        s: int = 1,
        p: int = 0,
        name: str = "c",
        act: str = "relu",
        transposed: bool = False,
    ) -> T:
        with net.scope(name):
            if p and s == 1 and not transposed:  # reflection padding, then an unpadded convolution
                pad = k // 2
                x = net.copy(
                    x, "reflection_pad", (x.shape[0], x.shape[1], x.shape[2] + 2 * pad, x.shape[3] + 2 * pad)
                )
                p = 0
            y = net.conv(
                x,
                c,
                k,
                s,
                p,
                bias=True,
                name="conv",
                transposed=transposed,
                output_padding=1 if transposed else 0,
            )
            y = net.norm(y, "instance", "in", affine=False)
            return net.act(y, act) if act else y

    x = cin(x, ngf, 7, 1, 3, "c7s1")
    x = cin(x, ngf * 2, 3, 2, 1, "d128")
    x = cin(x, ngf * 4, 3, 2, 1, "d256")
    for b in range(blocks):
        with net.scope(f"res{b}"):
            y = cin(x, ngf * 4, 3, 1, 1, "1")
            y = cin(y, ngf * 4, 3, 1, 1, "2", act="")
            x = net.add(x, y)
    x = cin(x, ngf * 2, 3, 2, 1, "u128", transposed=True)
    x = cin(x, ngf, 3, 2, 1, "u64", transposed=True)
    with net.scope("out"):
        x = net.copy(x, "reflection_pad", (x.shape[0], x.shape[1], x.shape[2] + 6, x.shape[3] + 6))
        return net.act(net.conv(x, 3, 7, 1, 0, bias=True), "tanh")


def _discriminator(net: Net, x: T, ndf: int = 64) -> T:
    x = net.act(net.conv(x, ndf, 4, 2, 1, bias=True, name="c64"), "leaky_relu")
    for c, s in ((ndf * 2, 2), (ndf * 4, 2), (ndf * 8, 1)):
        with net.scope(f"c{c}"):
            x = net.act(
                net.norm(net.conv(x, c, 4, s, 1, bias=True), "instance", "in", affine=False), "leaky_relu"
            )
    y = net.conv(x, 1, 4, 1, 1, bias=True, name="out")
    return net.reduce(y, (), "mse_loss", "gan_loss")


def cyclegan(net: Net) -> None:
    """CycleGAN at 256x256: two ResNet-9 generators, two 70x70 PatchGAN discriminators; per sample each
    generator runs twice (translation and cycle) and each discriminator twice (real and fake)."""
    x = net.input((3, 256, 256))
    for g in ("netG_A", "netG_B"):
        with net.repeat(2, g, shared=True):
            y = _generator(net, x)
            net.reduce(y, (), "l1_loss", "cycle_loss")
    for d in ("netD_A", "netD_B"):
        with net.repeat(2, d, shared=True):
            _discriminator(net, x)


def a3c(net: Net, actions: int = 6) -> None:
    """pytorch-a3c's ActorCritic: four 3x3/2 convolutions of 32 (ELU) on a 42x42 frame, an LSTM cell of
    256, the policy and value heads."""
    x = net.input((1, 42, 42))
    for i in range(4):
        x = net.act(net.conv(x, 32, 3, 2, 1, bias=True, name=f"conv{i + 1}"), "elu")
    x = net.flatten(x)
    with net.scope("lstm"):
        h = lstm_cell(net, x, 256)
    net.reduce(net.linear(h, 1, name="critic_linear"), (), "mse_loss", "value_loss")
    net.cross_entropy(net.linear(h, actions, name="actor_linear"), "policy_loss")


def lstm_cell(net: Net, x: T, hidden: int, gates: int = 4, name: str = "cell") -> T:
    """One LSTM (4 gates) or GRU (3 gates) step: input and recurrent GEMMs, the gate arithmetic."""
    g = net.linear(x, gates * hidden, name="ih")
    h0 = T((x.shape[0], hidden), True)
    r = net.linear(h0, gates * hidden, name="hh")
    y = net.pointwise([g, r], name, name=name, flops_per_element=3.0)
    return T((x.shape[0], hidden), y.grad)
