"""Trains the Fashion-MNIST MLP (784-256-128-10, AdamW, cosine schedule) from Python, saves the
checkpoint and reports the test accuracy, as `meganeura train fashion-mnist` does; the parameter names
are the command's, so `meganeura eval fashion-mnist --checkpoint F` reads what this writes.

    PYTHONPATH=build/python python3 examples/train_fashion_mnist.py [--epochs 1] [--limit N]
"""
import argparse
import gzip
import os

import numpy as np

import meganeura as mn


def load(split, root):
    """Images as float32 in [0, 1], [N, 784], and int32 labels, from the IDX files."""
    prefix = "train" if split == "train" else "t10k"
    with gzip.open(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return images.astype(np.float32) / 255, labels.astype(np.int32)


def mlp(batch):
    """The graph, its logits and its cross-entropy loss; nn.Linear's default initialization."""
    g = mn.Graph()
    h = g.input("images", [batch, 784])
    labels = g.input("labels", [batch], mn.int32)
    layers = [(784, 256), (256, 128), (128, 10)]
    for i, (n_in, n_out) in enumerate(layers):
        bound = n_in ** -0.5
        weight = g.parameter(f"fc{i + 1}.weight", [n_out, n_in], mn.Init.uniform(-bound, bound))
        bias = g.parameter(f"fc{i + 1}.bias", [n_out], mn.Init.uniform(-bound, bound))
        h = g.linear(h, weight, bias)
        if i + 1 < len(layers):
            h = g.relu(h)
    loss = g.cross_entropy(h, labels)
    g.output("logits", h)
    g.output("loss", loss)
    return g, loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=1, help="passes over the training set (default: 1)")
    ap.add_argument("--batch", type=int, default=64, help="images per step (default: 64)")
    ap.add_argument("--lr", type=float, default=1e-3, help="AdamW's peak learning rate (default: 1e-3)")
    ap.add_argument("--limit", type=int, default=0, help="train on the first N images only (default: all)")
    ap.add_argument("--checkpoint", default="fashion-mnist-python.safetensors", help="checkpoint to write")
    ap.add_argument("--data", default=os.path.join(os.environ.get("MEGANEURA_DATA_DIR", "/usr/share/datasets"),
                                                   "fashion-mnist"), help="folder of the IDX files")
    args = ap.parse_args()

    train_x, train_y = load("train", args.data)
    test_x, test_y = load("test", args.data)
    if args.limit:
        train_x, train_y = train_x[:args.limit], train_y[:args.limit]
    steps_per_epoch = len(train_x) // args.batch
    device = mn.Device.open()
    graph, loss = mlp(args.batch)
    session = mn.compile(graph, device, loss=loss, optimizer=mn.AdamW(lr=args.lr, weight_decay=0),
                         schedule=mn.LrSchedule("cosine", total_steps=steps_per_epoch * args.epochs))
    print(f"training on {device.name}: {len(train_x)} images, batch {args.batch}, {steps_per_epoch} steps per epoch")

    rng = np.random.default_rng(0)
    for epoch in range(args.epochs):
        order = rng.permutation(len(train_x))
        losses = []
        for step in range(steps_per_epoch):
            batch = order[step * args.batch:(step + 1) * args.batch]
            session.set("images", train_x[batch])
            session.set("labels", train_y[batch])
            losses.append(session.step())
        print(f"epoch {epoch + 1}: mean train loss {np.mean(losses):.4f}")
    session.save(args.checkpoint)

    eval_batch = 500
    eval_graph, _ = mlp(eval_batch)
    evaluation = mn.compile(eval_graph, device)
    evaluation.load(args.checkpoint)
    correct, test_loss = 0, 0.0
    for start in range(0, len(test_x), eval_batch):
        evaluation.set("images", test_x[start:start + eval_batch])
        evaluation.set("labels", test_y[start:start + eval_batch])
        evaluation.run()
        correct += int((evaluation.get("logits").argmax(axis=1) == test_y[start:start + eval_batch]).sum())
        test_loss += float(evaluation.get("loss")) * eval_batch / len(test_x)
    print(f"test loss {test_loss:.4f}, test accuracy: {100 * correct / len(test_x):.2f}% (checkpoint {args.checkpoint})")


if __name__ == "__main__":
    main()
