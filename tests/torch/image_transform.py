"""The oracle of meganeura's image preprocessing (src/io/image.cpp), for tests/image_test.cpp.

    image_transform.py DIR

writes DIR/*.png (RGB, grey, RGBA; odd sizes, wide and tall), DIR/photo.jpg with DIR/photo_pil.png
(PIL's decoding of it), and DIR/expected.safetensors: for each PNG and each (resize, crop) of SIZES
(and, with <name>.<top>.<left>.<height>.<width>.<flip>, for the REGIONS of RandomResizedCrop and
RandomHorizontalFlip that fit "wide" and "tall", resized to CROP),
  <name>.<resize>.<crop>.hand         torchvision's transform by hand in float64: the image as PIL's
                                      convert("RGB") gives it, torch's antialiased bilinear resize (a port
                                      of PIL's filter) in float64, CenterCrop's offsets, / 255, Normalize;
  <name>.<resize>.<crop>.torchvision  torchvision itself on the PIL image (Resize, CenterCrop, ToTensor,
                                      Normalize), which rounds to 8 bits after each of PIL's two passes.
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
import torchvision.transforms as T
from PIL import Image

from safetensors_io import write_safetensors

MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])
SIZES = [(36, 32), (16, 14), (19, 17), (100, 100), (256, 224)]
# RandomResizedCrop's regions (top, left, height, width), each resized to CROP square and maybe flipped.
REGIONS = [(3, 5, 40, 30, False), (0, 0, 61, 83, True), (10, 20, 17, 60, True), (100, 7, 200, 150, False)]
CROP = 32


def by_hand(image, resize, crop):
    pixels = torch.from_numpy(np.asarray(image.convert("RGB")).astype(np.float64)).permute(2, 0, 1)[None]
    h, w = pixels.shape[2:]
    size = (resize, resize * w // h) if h <= w else (resize * h // w, resize)
    resized = F.interpolate(pixels, size=size, mode="bilinear", antialias=True, align_corners=False)[0]
    top, left = int(round((size[0] - crop) / 2.0)), int(round((size[1] - crop) / 2.0))
    cut = resized[:, top:top + crop, left:left + crop].numpy()
    return (cut / 255 - MEAN[:, None, None]) / STD[:, None, None]


def augmented_by_hand(image, top, left, height, width, flip):
    pixels = torch.from_numpy(np.asarray(image.convert("RGB")).astype(np.float64)).permute(2, 0, 1)[None]
    region = pixels[:, :, top:top + height, left:left + width]
    resized = F.interpolate(region, size=(CROP, CROP), mode="bilinear", antialias=True, align_corners=False)[0]
    if flip:
        resized = resized.flip(2)
    return (resized.numpy() / 255 - MEAN[:, None, None]) / STD[:, None, None]


def augmented_by_torchvision(image, top, left, height, width, flip):
    import torchvision.transforms.functional as TF
    cut = TF.resized_crop(image.convert("RGB"), top, left, height, width, [CROP, CROP])
    if flip:
        cut = TF.hflip(cut)
    return TF.normalize(TF.to_tensor(cut), MEAN.tolist(), STD.tolist()).double().numpy()


def by_torchvision(image, resize, crop):
    transform = T.Compose([T.Resize(resize), T.CenterCrop(crop), T.ToTensor(), T.Normalize(MEAN.tolist(), STD.tolist())])
    return transform(image.convert("RGB")).double().numpy()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(7)
    y, x = np.mgrid[0:61, 0:83]
    smooth = np.stack([x * 255 // 83, y * 255 // 61, (x + y) % 256], axis=-1).astype(np.uint8)
    images = {
        "wide": Image.fromarray(smooth),                                                  # 61 x 83, a gradient
        "tall": Image.fromarray(rng.integers(0, 256, (300, 201, 3), dtype=np.uint8)),      # noise: every tap counts
        "small": Image.fromarray(rng.integers(0, 256, (20, 17, 3), dtype=np.uint8)),       # enlarged to 100
        "grey": Image.fromarray(rng.integers(0, 256, (45, 40), dtype=np.uint8), "L"),
        "alpha": Image.fromarray(rng.integers(0, 256, (40, 45, 4), dtype=np.uint8), "RGBA"),
    }
    expected = {}
    for name, image in images.items():
        image.save(os.path.join(out, name + ".png"))
        for resize, crop in SIZES:
            expected[f"{name}.{resize}.{crop}.hand"] = by_hand(image, resize, crop)
            expected[f"{name}.{resize}.{crop}.torchvision"] = by_torchvision(image, resize, crop)
    for name in ("wide", "tall"):
        for top, left, height, width, flip in REGIONS:
            if top + height <= images[name].height and left + width <= images[name].width:
                key = f"{name}.{top}.{left}.{height}.{width}.{int(flip)}"
                expected[key + ".hand"] = augmented_by_hand(images[name], top, left, height, width, flip)
                expected[key + ".torchvision"] = augmented_by_torchvision(images[name], top, left, height, width, flip)
    images["wide"].save(os.path.join(out, "photo.jpg"), quality=90)
    Image.open(os.path.join(out, "photo.jpg")).save(os.path.join(out, "photo_pil.png"))
    write_safetensors(os.path.join(out, "expected.safetensors"), expected)


if __name__ == "__main__":
    main()
