"""The Python module against PyTorch (Debian's python3-torch) and numpy: forward and AdamW training of
an MLP on the same weights, dtypes and shapes of what get() returns, errors as meganeura.Error, graph
lifetimes, checkpoints, and the README's Fashion-MNIST example end to end."""
import gc
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

import meganeura as mn

SOURCE = os.environ.get("MEGANEURA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def relative_l2(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return np.linalg.norm(got - want) / np.linalg.norm(want)


def mlp_graph(batch, sizes):
    """An MLP with ReLU between its layers and a cross-entropy loss, PyTorch's parameter names."""
    g = mn.Graph()
    h = g.input("x", [batch, sizes[0]])
    labels = g.input("labels", [batch], mn.int32)
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        init = mn.Init.uniform(-n_in ** -0.5, n_in ** -0.5)
        h = g.linear(h, g.parameter(f"{2 * i}.weight", [n_out, n_in], init), g.parameter(f"{2 * i}.bias", [n_out], init))
        if i + 2 < len(sizes):
            h = g.relu(h)
    loss = g.cross_entropy(h, labels)
    g.output("logits", h)
    g.output("loss", loss)
    return g, loss


def torch_mlp(sizes):
    torch.manual_seed(0)
    layers = []
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        layers.append(torch.nn.Linear(n_in, n_out))
        if i + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def copy_weights(session, model):
    session.set({name: p.detach().numpy() for name, p in model.state_dict().items()})


def data(batch, features, classes):
    rng = np.random.default_rng(1)
    return rng.standard_normal((batch, features)).astype(np.float32), rng.integers(0, classes, batch).astype(np.int32)


SIZES = [20, 33, 17, 5]


def test_forward_matches_torch():
    model = torch_mlp(SIZES).double()
    x, labels = data(9, SIZES[0], SIZES[-1])
    g, _ = mlp_graph(9, SIZES)
    s = mn.compile(g, mn.Device.open())
    copy_weights(s, model.float())
    s.set("x", x)
    s.set("labels", labels)
    s.run()
    model = model.double()
    logits = model(torch.from_numpy(x).double())
    want_loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(labels).long())
    assert s.get("logits").shape == (9, SIZES[-1]) and s.get("logits").dtype == np.float32
    assert relative_l2(s.get("logits"), logits.detach().numpy()) < 1e-5
    assert abs(float(s.get("loss")) - want_loss.item()) < 1e-5 * want_loss.item()


def test_adamw_steps_match_torch():
    model = torch_mlp(SIZES)
    x, labels = data(8, SIZES[0], SIZES[-1])
    g, loss = mlp_graph(8, SIZES)
    s = mn.compile(g, loss=loss, optimizer=mn.AdamW(lr=1e-2, weight_decay=0.1))
    copy_weights(s, model)
    reference = model.double()
    opt = torch.optim.AdamW(reference.parameters(), lr=1e-2, weight_decay=0.1)
    for step in range(3):
        s.set("x", x)
        s.set("labels", labels)
        got = s.step()
        opt.zero_grad()
        want = torch.nn.functional.cross_entropy(reference(torch.from_numpy(x).double()), torch.from_numpy(labels).long())
        want.backward()
        opt.step()
        assert abs(got - want.item()) < 1e-4 * want.item(), f"step {step + 1}"
    assert s.step_count == 3
    for name, p in reference.state_dict().items():
        assert relative_l2(s.get(name), p.numpy()) < 1e-4, name


def test_get_returns_the_tensors_shape_and_dtype():
    g = mn.Graph()
    ids = g.input("ids", [2, 3], mn.int32)
    table = g.parameter("table", [7, 4], mn.Init.normal(0, 1))
    g.output("rows", g.embedding(ids, table))
    s = mn.compile(g)
    ids_value = np.array([[0, 6, 2], [3, 3, 1]], np.int32)
    s.set("ids", ids_value)
    s.run()
    assert s.get("ids").dtype == np.int32 and (s.get("ids") == ids_value).all()
    assert s.shape("rows") == (2, 3, 4)
    np.testing.assert_array_equal(s.get("rows"), s.get("table")[ids_value])


def test_several_tensors_are_set_and_read_at_once():
    g, _ = mlp_graph(4, [3, 2])
    s = mn.compile(g)
    w, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([0.5, -1], np.float32)
    x, labels = np.ones((4, 3), np.float32), np.array([0, 1, 1, 0])  # int64 labels, as set(name, array) takes them
    s.set({"0.weight": w, "0.bias": b, "x": x, "labels": labels})
    s.run()
    got = s.get(["logits", "0.weight", "labels"])
    assert sorted(got) == ["0.weight", "labels", "logits"]
    assert np.array_equal(got["0.weight"], w) and got["labels"].dtype == np.int32 and got["labels"].tolist() == [0, 1, 1, 0]
    assert np.allclose(got["logits"], np.tile(w.sum(1) + b, (4, 1)))
    with pytest.raises(mn.Error, match=re.escape("set '0.bias': the array is (3), the tensor (2)")):
        s.set({"labels": np.array([1, 1, 1, 1]), "0.bias": np.zeros(3, np.float32)})
    assert s.get("labels").tolist() == [0, 1, 1, 0]  # every array is checked before any is written
    with pytest.raises(mn.Error, match=re.escape("set '0.bias': the tensor is f32; pass float values")):
        s.set({"0.bias": np.array([1, 2])})


def test_operators_build_nodes():
    g = mn.Graph()
    a = g.input("a", [3])
    g.output("y", (2.0 * a + 1.0) / (a - 0.5) * a - a)
    s = mn.compile(g)
    av = np.array([1.0, 2.0, -3.0], np.float32)
    s.set("a", av)
    s.run()
    np.testing.assert_allclose(s.get("y"), (2 * av + 1) / (av - 0.5) * av - av, rtol=1e-6)


def test_errors_are_meganeura_errors():
    g = mn.Graph()
    x = g.input("x", [3, 4])
    with pytest.raises(mn.Error, match=re.escape("[linear] x is (3,4), weight is (4,3)")):
        g.linear(x, g.parameter("w", [4, 3]))
    g.output("y", g.relu(x))
    s = mn.compile(g)
    with pytest.raises(mn.Error, match=re.escape("set 'x': the array is (4,3), the tensor (3,4)")):
        s.set("x", np.zeros((4, 3), np.float32))
    with pytest.raises(mn.Error, match="nope"):
        s.get("nope")
    with pytest.raises(mn.Error, match="precision must be 'strict' or 'fast'"):
        mn.compile(g, precision="medium")
    assert issubclass(mn.Error, RuntimeError)


def test_tensors_keep_their_graph_alive():
    def build():
        g = mn.Graph()
        return g.input("x", [2, 2])
    x = build()
    gc.collect()
    y = x * 3.0 + x  # the graph is gone from Python's names, not from memory
    assert y.shape == (2, 2)


def test_checkpoint_round_trip(tmp_path):
    g, loss = mlp_graph(4, [6, 5, 3])
    s = mn.compile(g, loss=loss, seed=3)
    x, labels = data(4, 6, 3)
    s.set("x", x)
    s.set("labels", labels)
    s.step()
    saved = s.get("0.weight").copy()
    s.save(str(tmp_path / "c.safetensors"))
    s.step()
    assert not np.array_equal(s.get("0.weight"), saved)
    s.load(str(tmp_path / "c.safetensors"))
    np.testing.assert_array_equal(s.get("0.weight"), saved)
    assert s.step_count == 1


def test_skipped_parameters_start_at_zero_until_loaded(tmp_path):
    g, loss = mlp_graph(4, [6, 5, 3])
    s = mn.compile(g, loss=loss, seed=3)
    s.save(str(tmp_path / "c.safetensors"))
    loaded = mn.compile(g, loss=loss, seed=3, skip_init=["0.weight"])
    assert not loaded.get("0.weight").any()
    np.testing.assert_array_equal(loaded.get("0.bias"), s.get("0.bias"))  # drawn as ever
    loaded.load(str(tmp_path / "c.safetensors"))
    np.testing.assert_array_equal(loaded.get("0.weight"), s.get("0.weight"))
    with pytest.raises(mn.Error, match=re.escape("skip_init: '0.wieght' is not a parameter of the graph")):
        mn.compile(g, loss=loss, skip_init=["0.wieght"])


def test_fashion_mnist_example_trains_and_the_command_reads_its_checkpoint(tmp_path):
    checkpoint = str(tmp_path / "fm.safetensors")
    out = subprocess.run([sys.executable, os.path.join(SOURCE, "examples", "train_fashion_mnist.py"), "--limit", "4096",
                          "--checkpoint", checkpoint], capture_output=True, text=True, check=True).stdout
    accuracy = float(re.search(r"test accuracy: ([0-9.]+)%", out).group(1))
    assert accuracy > 50, out  # chance is 10%
    evaluated = subprocess.run([os.environ["MEGANEURA_BINARY"], "eval", "fashion-mnist", "--checkpoint", checkpoint],
                               capture_output=True, text=True, check=True).stdout
    assert f"test accuracy: {accuracy:.2f}%" in evaluated, (out, evaluated)


def test_import_onnx_matches_torch(tmp_path):
    model = torch_mlp(SIZES).eval()
    x, _ = data(4, SIZES[0], SIZES[-1])
    path = str(tmp_path / "mlp.onnx")
    torch.onnx.export(model, (torch.from_numpy(x),), path, input_names=["x"], output_names=["logits"], opset_version=13)
    imported = mn.import_onnx(path)
    assert imported.inputs == ["x"] and imported.outputs == ["logits"]
    assert set(imported.parameters) == set(model.state_dict())
    s = mn.compile(imported.graph)
    imported.load_parameters(s)
    s.set("x", x)
    s.run()
    want = model.double()(torch.from_numpy(x).double()).detach().numpy()
    assert relative_l2(s.get("logits"), want) < 1e-5
    with pytest.raises(mn.Error, match="not an ONNX model"):
        mn.import_onnx(__file__)
